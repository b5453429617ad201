"""Hook receipts against the screen: confirm a delivery, cross-check it, record drift.

A delivery is confirmed by whichever source sees it first (the agent's prompt receipt, or
the screen); the other source then has :data:`~politerm.driver.receipts.HOOK_GRACE`
seconds to agree. When it does, :attr:`DeliveryResult.sources` names both; when it does
not, a :class:`~politerm.driver.receipts.Drift` is recorded and the agent's own event
wins (a prompt the agent says it accepted is not typed again).
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm._internal.aio import wait_any
from politerm.agents.state import AgentState
from politerm.driver.delivery import DeliveryResult, Outcome
from politerm.driver.receipts import HOOK_GRACE, Drift, Source
from politerm.errors import PaneNotFound
from politerm.redact import TAG_RE

if t.TYPE_CHECKING:
    import asyncio

    from politerm.driver.agent import AgentDriver
    from politerm.driver.receipts import Receipts
    from politerm.terminal import Snapshot


def _plain(text: str | bytes) -> str:
    """The prompt as the agent sees it, vault markers reduced to what a receipt keeps.

    Examples
    --------
    >>> _plain(b"use [REDACTED:github-token#0123456789abcdef] now")
    'use [REDACTED:github-token] now'
    """
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return TAG_RE.sub(lambda m: f"[REDACTED:{m['kind']}]", raw)


class PromptCheck:
    """The agent's receipt for one prompt (see :class:`~politerm.driver.delivery.ReceiptCheck`)."""

    def __init__(self, receipts: Receipts, mark: int, text: str | bytes) -> None:
        self.receipts = receipts
        self.mark = mark
        self.text = _plain(text)

    def confirmed(self) -> str | None:
        """``"<cli> hook <event> accepted the prompt"`` once its receipt is in."""
        e = self.receipts.prompt_receipt(self.mark, self.text)
        if e is None:
            return None
        return f"{e.cli} hook {e.event} accepted the prompt ({e.prompt_len} chars)"

    def event(self) -> asyncio.Event:
        """Set when the channel is written."""
        return self.receipts.event()


def screen_agrees(driver: AgentDriver, snap: Snapshot) -> str | None:
    """What on the screen shows a prompt was submitted, or None."""
    reading = driver.profile.detect(snap)
    if reading.state in (AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG):
        return f"{reading.state.value} ({reading.rule})"
    if (
        driver.profile.detectors.input_line is not None
        and reading.input_text == ""
        and not driver.profile.paste_marker_in(snap.lines[-8:])
    ):
        return "input box empty"
    return None


async def _wait(
    check: t.Callable[[], t.Awaitable[str | None]],
    events: t.Callable[[], list[asyncio.Event]],
    seconds: float,
) -> str | None:
    """Re-check on each event until ``check`` answers or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        evs = events()
        found = await check()
        left = deadline - time.monotonic()
        if found is not None or left <= 0:
            return found
        await wait_any(*evs, timeout=min(left, 1.0))


async def cross_check_delivery(
    driver: AgentDriver, result: DeliveryResult, check: PromptCheck, *, grace: float = HOOK_GRACE
) -> DeliveryResult:
    """Let the source that did not decide ``result`` agree, or record drift."""
    rc = check.receipts
    submitted = result.ok or (result.outcome is Outcome.BLOCKED and result.submitted)
    if not submitted:
        hook = check.confirmed()
        if hook is None or result.outcome is Outcome.AGENT_EXITED:
            return result
        # The screen says not submitted; the agent says it took the prompt. No retry.
        driver.drift(
            Drift("delivery", hook, f"{result.outcome.value}: {result.rule}"),
        )
        return dataclasses.replace(
            result,
            outcome=Outcome.DELIVERED,
            evidence=(hook, *result.evidence),
            submitted=True,
            rule="prompt receipt",
            sources=(Source.HOOK,),
        )
    if Source.HOOK in result.sources and Source.SCREEN in result.sources:
        return result
    if Source.HOOK in result.sources:

        async def look() -> str | None:
            try:
                snap = await driver.term.snapshot()
            except PaneNotFound:
                return "pane gone"
            return screen_agrees(driver, snap)

        seen = await _wait(look, lambda: [driver.term.output_event()], grace)
        if seen is None:
            tail = " | ".join(ln.strip() for ln in driver.last_screen[-3:] if ln.strip())
            driver.drift(
                Drift("delivery", result.evidence[0], f"not submitted after {grace:g}s: {tail}")
            )
            return result
        return dataclasses.replace(result, sources=(Source.HOOK, Source.SCREEN))
    if rc.silent:
        return result

    async def receipt() -> str | None:
        return check.confirmed()

    hook = await _wait(receipt, lambda: [rc.event()], grace)
    if hook is None:
        if not rc.events:
            rc.silent = True  # its hooks never reported anything: stop waiting for them
        driver.drift(
            Drift(
                "delivery",
                f"no prompt receipt within {grace:g}s"
                + ("" if rc.events else " (no receipt at all: hooks not running?)"),
                f"submitted ({result.rule})",
            )
        )
        return result
    return dataclasses.replace(
        result, evidence=(hook, *result.evidence), sources=(Source.HOOK, Source.SCREEN)
    )
