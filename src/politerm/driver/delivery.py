"""Delivery with confirmation: paste a prompt, submit it, and prove it was submitted.

The prompt goes in as a paste (``load-buffer`` + ``paste-buffer``), never as keystrokes.
Before the paste the input box must be empty: text left there (by a person, or by an
earlier attempt) is cleared with the profile's ``clear_input`` keys and the box is checked
again, so two prompts are never submitted as one. After the submit key, the screen must
show the text left the input area or the agent became busy; otherwise the submit key is
pressed again with backoff. The outcome is one of :class:`Outcome`, returned with the
screen lines that decided it.

Where the agent reports its own prompt event (a hook receipt, :mod:`politerm.driver.receipts`)
or writes the prompt to its transcript, a :class:`ReceiptCheck` is consulted beside the
screen: the receipt confirms the delivery (and no submit key is pressed again), and
:attr:`DeliveryResult.sources` says which sources confirmed it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
import typing as t

from politerm._internal import vault
from politerm._internal.aio import wait_any, wait_event
from politerm.agents.state import AgentState
from politerm.driver.receipts import Source
from politerm.errors import PaneNotFound

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from politerm.agents.profile import AgentProfile
    from politerm.agents.state import StateReading
    from politerm.terminal import Snapshot, Terminal

log = logging.getLogger(__name__)

# Fallback re-check while no output arrives (an agent may change state silently, e.g. die).
_RECHECK = 0.25


class Outcome(str, enum.Enum):
    """How a delivery ended."""

    DELIVERED = "delivered"
    STRANDED = "stranded"
    BLOCKED = "blocked"
    AGENT_EXITED = "agent_exited"


@dataclasses.dataclass(frozen=True)
class DeliveryResult:
    """The outcome of one delivery and the evidence that decided it.

    Attributes
    ----------
    outcome
        DELIVERED, STRANDED, BLOCKED or AGENT_EXITED.
    evidence
        Screen lines (or facts) that decided the outcome.
    submits
        How many times the submit key was pressed.
    submitted
        Whether the text is known to have been submitted (a BLOCKED delivery may have been:
        the agent read it and asked for approval).
    elapsed
        Seconds from the start of the paste to the decision.
    rule
        Which check decided it, for logs.
    sources
        Which sources confirmed the outcome: ``hook`` (the agent's own prompt event),
        ``transcript``, ``screen``.
    """

    outcome: Outcome
    evidence: tuple[str, ...]
    submits: int
    submitted: bool
    elapsed: float
    rule: str = ""
    sources: tuple[Source, ...] = (Source.SCREEN,)
    turn_id: int | None = None
    """The prompt's row in the journal of turns, when the caller named its record."""

    @property
    def source(self) -> str:
        """Which sources confirmed it, e.g. ``hook+screen``."""
        return "+".join(self.sources)

    @property
    def ok(self) -> bool:
        """True for DELIVERED."""
        return self.outcome is Outcome.DELIVERED

    @property
    def got_in(self) -> bool:
        """The agent has the prompt: DELIVERED, or BLOCKED by a question after the submit.

        Examples
        --------
        >>> DeliveryResult(Outcome.BLOCKED, (), 1, True, 0.1).got_in
        True
        >>> DeliveryResult(Outcome.BLOCKED, (), 0, False, 0.1).got_in
        False
        """
        return self.ok or (self.outcome is Outcome.BLOCKED and self.submitted)


class ReceiptCheck(t.Protocol):
    """The agent's own confirmation of a prompt, consulted while the screen is watched."""

    def confirmed(self) -> tuple[Source, str] | None:
        """Which source confirmed the prompt and one line of evidence; None while none has."""

    def event(self) -> asyncio.Event:
        """Set when a receipt may have arrived."""


async def _snapshot(term: Terminal) -> Snapshot | None:
    try:
        return await term.snapshot()
    except PaneNotFound:
        return None


def _gone(elapsed: float, submits: int, *, submitted: bool) -> DeliveryResult:
    return DeliveryResult(
        Outcome.AGENT_EXITED, ("pane is gone",), submits, submitted, elapsed, "pane missing"
    )


def _blocking(reading: StateReading) -> bool:
    return reading.state in (AgentState.WAITING_APPROVAL, AgentState.DIALOG)


async def deliver(
    term: Terminal,
    text: str | bytes,
    profile: AgentProfile,
    *,
    paste_timeout: float | None = None,
    already_pasted: bool = False,
    snap: Snapshot | None = None,
    receipt: ReceiptCheck | None = None,
    before_submit: Callable[[], Awaitable[None]] | None = None,
) -> DeliveryResult:
    """Paste ``text`` into ``term``, press the profile's submit key, and confirm it.

    Parameters
    ----------
    term
        Where the agent runs (a tmux pane or a PTY).
    text
        The prompt; bytes are sent exactly, str as UTF-8.
    profile
        Submit key, delay, retries, backoff and the detectors that judge the screen.
    paste_timeout
        How long to wait for the pasted text to show in the input box before submitting
        anyway; default from the profile, longer for large texts.
    already_pasted
        The text is still in the input box from an earlier, STRANDED attempt: only press
        the submit key again (pasting it twice would double it).
    snap
        The screen now, when the caller has just captured it and the program printed
        nothing since; otherwise it is captured here.
    receipt
        The agent's own prompt receipt, where its hooks report one: it confirms the
        delivery as the screen does.
    before_submit
        Awaited right before each press of the submit key; what it raises is raised here,
        with the text left unsubmitted in the input box.

    Returns
    -------
    DeliveryResult
        Never raises for an agent that misbehaves; the outcome says what happened.
    """
    if isinstance(text, str) and vault.needs_reveal(text):
        # The store keeps secrets as markers; the agent gets the original text.
        client = getattr(term, "client", None)
        fetch = vault.tmux_fetcher(client) if client is not None else vault.socket_fetcher()
        text, missing = await vault.reveal_text(text, fetch)
        if missing:
            log.warning("%d secret(s) no longer held by any vault: sent redacted", len(missing))
    data = text.encode() if isinstance(text, str) else text
    start = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - start

    fresh = snap is not None
    snap = snap or await _snapshot(term)
    if snap is None:
        return _gone(elapsed(), 0, submitted=False)
    before = profile.detect(snap)
    if before.state is AgentState.EXITED:
        return DeliveryResult(
            Outcome.AGENT_EXITED, before.evidence, 0, False, elapsed(), before.rule
        )
    if _blocking(before):
        return DeliveryResult(Outcome.BLOCKED, before.evidence, 0, False, elapsed(), before.rule)
    if not fresh or snap.in_mode:
        await term.prepare_input()
    if not already_pasted and profile.input_text(snap):
        cleared = await clear_input(term, profile)
        if cleared is None:
            return _gone(elapsed(), 0, submitted=False)
        if profile.input_text(cleared):
            why = (
                "the input box holds text that the clear_input keys did not remove"
                if profile.clear_input
                else "the input box holds text and the profile has no clear_input keys"
            )
            return DeliveryResult(Outcome.BLOCKED, tuple(cleared.tail(3)), 0, False, elapsed(), why)
        snap = cleared
    screen_before = snap.lines

    if already_pasted:
        data = b""  # nothing to paste, and no size to wait for
    else:
        try:
            await term.paste(data, bracketed=profile.bracketed_paste, keep_lf=profile.keep_lf)
        except PaneNotFound:
            return _gone(elapsed(), 0, submitted=False)

    # Wait until the paste shows in the input box, so the submit key cannot overtake it.
    limit = paste_timeout if paste_timeout is not None else profile.paste_timeout
    limit += len(data) / 200_000  # a 1 MiB paste takes the program a while to take in
    deadline = time.monotonic() + limit
    can_see_input = profile.detectors.input_line is not None or profile.detectors.paste_marker
    seen = False
    while can_see_input:
        event = term.output_event()
        snap = await _snapshot(term)
        if snap is None:
            return _gone(elapsed(), 0, submitted=False)
        if not snap.alive:
            r = profile.detect(snap)
            return DeliveryResult(Outcome.AGENT_EXITED, r.evidence, 0, False, elapsed(), r.rule)
        seen = profile.paste_shown(snap)
        if seen or time.monotonic() >= deadline:
            break
        await wait_event(event, min(_RECHECK, deadline - time.monotonic()))

    submits = 0
    backoff = profile.retry_backoff
    while True:
        if profile.submit_delay:
            await asyncio.sleep(profile.submit_delay)
        if before_submit is not None:
            # Raises when the caller may no longer submit (a fleet lease lost since the
            # paste): the text stays in the input box, unsubmitted.
            await before_submit()
        try:
            await term.send_keys(profile.submit_key)
        except PaneNotFound:
            return _gone(elapsed(), submits, submitted=submits > 0)
        submits += 1
        result = await _confirm(
            term,
            profile,
            screen_before,
            profile.confirm_timeout,
            submits,
            start,
            seen=seen,
            receipt=receipt,
        )
        if result is not None:
            log.debug("delivery to %s: %s after %d submit(s)", term.name, result.outcome, submits)
            return result
        if submits > profile.submit_retries:
            snap = await _snapshot(term)
            tail = tuple(snap.tail(6)) if snap else ("pane is gone",)
            return DeliveryResult(
                Outcome.STRANDED,
                tail,
                submits,
                False,
                elapsed(),
                f"text still in the input box after {submits} submit key presses",
            )
        log.info(
            "delivery to %s: not submitted yet, pressing %s again", term.name, profile.submit_key
        )
        await asyncio.sleep(backoff)
        backoff *= 2


async def _confirm(
    term: Terminal,
    profile: AgentProfile,
    screen_before: tuple[str, ...],
    timeout: float,
    submits: int,
    start: float,
    *,
    seen: bool,
    receipt: ReceiptCheck | None = None,
) -> DeliveryResult | None:
    """Watch the screen after a submit key; a result when decided, None to press again.

    An empty input box proves submission only if the text was seen in it first; otherwise
    (a program that never showed the paste) only busy, or a changed screen, does. The
    agent's own receipt (when there is one) confirms it too, whatever the screen shows.
    """
    deadline = time.monotonic() + timeout
    has_input = profile.detectors.input_line is not None
    has_busy = bool(profile.detectors.busy)
    while True:
        event = term.output_event()
        snap = await _snapshot(term)
        now = time.monotonic()
        if snap is None:
            return _gone(now - start, submits, submitted=True)
        reading = profile.detect(snap)
        if reading.state is AgentState.EXITED:
            return DeliveryResult(
                Outcome.AGENT_EXITED, reading.evidence, submits, True, now - start, reading.rule
            )
        if _blocking(reading):
            return DeliveryResult(
                Outcome.BLOCKED, reading.evidence, submits, True, now - start, reading.rule
            )
        agent = receipt.confirmed() if receipt is not None else None
        if reading.state is AgentState.BUSY:
            return DeliveryResult(
                Outcome.DELIVERED,
                (agent[1], *reading.evidence) if agent else reading.evidence,
                submits,
                True,
                now - start,
                reading.rule,
                (agent[0], Source.SCREEN) if agent else (Source.SCREEN,),
            )
        if agent:
            return DeliveryResult(
                Outcome.DELIVERED,
                (agent[1], *snap.tail(3)),
                submits,
                True,
                now - start,
                "prompt receipt",
                (agent[0],),
            )
        if (
            has_input
            and reading.input_text == ""
            and not _paste_marker_left(profile, snap)
            and (seen or snap.lines != screen_before)
        ):
            return DeliveryResult(
                Outcome.DELIVERED,
                ("input box is empty again", *snap.tail(3)),
                submits,
                True,
                now - start,
                "input cleared",
            )
        if not has_input and not has_busy and snap.lines != screen_before:
            # A program we cannot read: the screen changing after Enter is all we can see.
            return DeliveryResult(
                Outcome.DELIVERED, tuple(snap.tail(3)), submits, True, now - start, "screen changed"
            )
        if now >= deadline:
            return None
        wait = min(_RECHECK, deadline - now)
        if receipt is not None:
            await wait_any(event, receipt.event(), timeout=max(0.0, wait))
        else:
            await wait_event(event, wait)


async def clear_input(term: Terminal, profile: AgentProfile) -> Snapshot | None:
    """Empty the agent's input box with the profile's ``clear_input`` keys, then verify.

    Nothing is pressed while a question or dialog is open: the keys (ctrl-c) would dismiss
    it, and the line a question's options are drawn on can read as text in the box.

    Returns
    -------
    Snapshot or None
        The last screen looked at (its input box is empty unless the keys did not work, the
        profile has none, or a question is open); None when the terminal is gone.
    """
    snap = await _snapshot(term)
    if snap is None or _blocking(profile.detect(snap)):
        return snap
    for _ in range(2):  # a redraw can eat the first press
        if not profile.input_text(snap) or not profile.clear_input:
            return snap
        try:
            await term.send_keys(*profile.clear_input)
        except PaneNotFound:
            return None
        deadline = time.monotonic() + profile.confirm_timeout
        while True:
            event = term.output_event()
            snap = await _snapshot(term)
            if snap is None:
                return None
            if not profile.input_text(snap) or time.monotonic() >= deadline:
                break
            await wait_event(event, min(_RECHECK, deadline - time.monotonic()))
        if not profile.input_text(snap):
            log.info("cleared the input box of %s", term.name)
            return snap
    return snap


def _paste_marker_left(profile: AgentProfile, snap: Snapshot) -> bool:
    # Only the bottom of the screen holds the input box; history above may show old markers.
    return profile.paste_marker_in(snap.lines[-8:])
