"""Hook receipts against the screen: confirm a delivery, cross-check it, record drift.

A delivery is confirmed by whichever source sees it first (the agent's prompt receipt, or
the screen); the other source then has :data:`~politerm.driver.receipts.HOOK_GRACE`
seconds to agree. When it does, :attr:`DeliveryResult.sources` names both; when it does
not, a :class:`~politerm.driver.receipts.Drift` is recorded and the agent's own event
wins (a prompt the agent says it accepted is not typed again).
"""

from __future__ import annotations

import asyncio
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
    from politerm.agents.state import StateReading
    from politerm.driver.agent import AgentDriver
    from politerm.driver.receipts import Receipts
    from politerm.driver.transcriptcheck import TranscriptCheck
    from politerm.hooks.events import HookEvent
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

    def confirmed(self) -> tuple[Source, str] | None:
        """``(HOOK, "<cli> hook <event> accepted the prompt")`` once its receipt is in."""
        e = self.receipts.prompt_receipt(self.mark, self.text)
        if e is None:
            return None
        return Source.HOOK, f"{e.cli} hook {e.event} accepted the prompt ({e.prompt_len} chars)"

    def event(self) -> asyncio.Event:
        """Set when the channel is written."""
        return self.receipts.event()


class AgentChecks:
    """The agent's own confirmations of one prompt: its hook, then its transcript."""

    def __init__(self, hook: PromptCheck | None, transcript: TranscriptCheck | None) -> None:
        self.hook = hook
        self.transcript = transcript
        self._idle: asyncio.Event | None = None

    def confirmed(self) -> tuple[Source, str] | None:
        """The first source that holds the prompt, with its evidence."""
        for check in (self.hook, self.transcript):
            found = check.confirmed() if check is not None else None
            if found is not None:
                return found
        return None

    def event(self) -> asyncio.Event:
        """The hook channel's event (a transcript is looked at on the screen's events)."""
        if self.hook is not None:
            return self.hook.event()
        if self._idle is None:
            self._idle = asyncio.Event()
        return self._idle


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
    driver: AgentDriver, result: DeliveryResult, checks: AgentChecks, *, grace: float = HOOK_GRACE
) -> DeliveryResult:
    """Let the source that did not decide ``result`` agree, or record drift.

    The hook and the screen must agree within ``grace``; the transcript is only added to
    the sources when it already holds the prompt (it may be written later, or not at all).
    """
    submitted = result.got_in
    if not submitted:
        agent = checks.confirmed()
        if agent is None or result.outcome is Outcome.AGENT_EXITED:
            return result
        # The screen says not submitted; the agent says it took the prompt. No retry.
        driver.drift(Drift("delivery", agent[1], f"{result.outcome.value}: {result.rule}"))
        return dataclasses.replace(
            result,
            outcome=Outcome.DELIVERED,
            evidence=(agent[1], *result.evidence),
            submitted=True,
            rule="prompt receipt",
            sources=(agent[0],),
        )
    if Source.SCREEN not in result.sources:
        result = await _screen_agrees(driver, result, grace)
    elif checks.hook is not None and Source.HOOK not in result.sources:
        result = await _hook_agrees(driver, result, checks.hook, grace)
    if checks.transcript is not None and Source.TRANSCRIPT not in result.sources:
        # An agent with hooks but no prompt event (Codex), or with no hooks and a record
        # that also tells its turn's end (Gemini CLI, opencode): the transcript is its word,
        # so wait for it (once only, if it never appears); elsewhere it is one look.
        own_word = driver._word.receipts is not None
        own_word = own_word or checks.transcript.spec.format in checks.transcript.TURN_FORMATS
        waits = checks.hook is None and own_word and not driver._word.transcript_missing
        result = await _transcript_agrees(
            driver, result, checks.transcript, grace if waits else 0.0
        )
        if waits and Source.TRANSCRIPT not in result.sources and not checks.transcript.located():
            driver._word.transcript_missing = True
    return result


async def _transcript_agrees(
    driver: AgentDriver, result: DeliveryResult, check: TranscriptCheck, grace: float
) -> DeliveryResult:
    async def look() -> str | None:
        found = check.confirmed()
        return None if found is None else found[1]

    seen = await _wait(look, lambda: [driver._term.output_event()], grace)
    if seen is None:
        if grace > 0:
            driver.drift(
                Drift(
                    "delivery",
                    f"the transcript does not hold the prompt after {grace:g}s",
                    f"submitted ({result.rule})",
                )
            )
        return result
    return dataclasses.replace(
        result, evidence=(*result.evidence, seen), sources=(*result.sources, Source.TRANSCRIPT)
    )


async def _screen_agrees(
    driver: AgentDriver, result: DeliveryResult, grace: float
) -> DeliveryResult:
    async def look() -> str | None:
        try:
            snap = await driver._term.snapshot()
        except PaneNotFound:
            return "pane gone"
        return screen_agrees(driver, snap)

    seen = await _wait(look, lambda: [driver._term.output_event()], grace)
    if seen is None:
        tail = " | ".join(ln.strip() for ln in driver.last_screen[-3:] if ln.strip())
        driver.drift(
            Drift("delivery", result.evidence[0], f"not submitted after {grace:g}s: {tail}")
        )
        return result
    return dataclasses.replace(result, sources=(*result.sources, Source.SCREEN))


async def _hook_agrees(
    driver: AgentDriver, result: DeliveryResult, check: PromptCheck, grace: float
) -> DeliveryResult:
    rc = check.receipts
    if rc.silent:
        return result

    async def receipt() -> str | None:
        found = check.confirmed()
        return None if found is None else found[1]

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
        result, evidence=(hook, *result.evidence), sources=(Source.HOOK, *result.sources)
    )


async def hook_approval_open(driver: AgentDriver, reading: StateReading) -> HookEvent | None:
    """The open approval the agent's hooks announced since its last delivery.

    One the screen does not show after the hooks' grace is recorded as ``drift``.
    """
    rc = await driver.hook_receipts()
    if rc is None:
        return None
    pending = rc.approval_open(driver._word.mark)
    if pending is None or reading.state in (AgentState.WAITING_APPROVAL, AgentState.EXITED):
        return pending
    if time.time() - pending.at >= driver.hook_grace:
        driver.drift(
            Drift(
                "approval",
                f"a permission question is open ({pending.describe()})",
                f"{reading.state.value} ({reading.rule})",
            ),
            key=f"approval@{pending.offset}",
        )
    return pending
