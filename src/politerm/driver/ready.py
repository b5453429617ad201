"""Waiting until an agent is ready for a prompt, answering its start-up dialogs."""

from __future__ import annotations

import time
import typing as t

from politerm._internal.aio import wait_event
from politerm.agents.state import AgentState, StateReading
from politerm.errors import AgentExited, AgentTimeout
from politerm.hooks.events import HookKind

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.agents.profile import AgentProfile
    from politerm.driver.receipts import Receipts
    from politerm.terminal import Terminal

# Fallback look while nothing is printed (a program may become ready silently).
_RECHECK = 0.5
# A dialog that comes back after this many answers is not one our keys can answer.
_MAX_ANSWERS = 3
# The same dialog still on screen this soon after its answer is not answered again yet.
_REANSWER = 2.0
# Longest a ready screen waits for the session receipt of a CLI whose hooks send one: hooks
# that do not run (a broken install) must not keep an agent from starting.
SESSION_GRACE = 20.0


async def wait_ready(
    term: Terminal,
    profile: AgentProfile,
    *,
    timeout: float,
    name: str = "agent",
    say: Callable[[str], None] | None = None,
    on_reading: Callable[[StateReading], None] | None = None,
    on_dialog: Callable[[str, tuple[str, ...]], None] | None = None,
    receipts: Receipts | None = None,
) -> StateReading:
    """Wait until the agent is ready for a prompt, answering start-up dialogs by its profile.

    A profile with no ready or input-line detector counts a screen that stays unchanged for
    its ``quiescence`` as ready. ``on_reading`` sees every reading taken (a diagnostic
    reports them), ``on_dialog`` every dialog answered (its name and the keys pressed).
    ``receipts`` (read from before the launch) hold a ready screen of a CLI whose hooks
    report its session start until that receipt came, at most :data:`SESSION_GRACE`
    seconds: Gemini CLI draws its input box before its SessionStart hook has run, and drops
    a prompt submitted meanwhile.

    Raises
    ------
    AgentExited
        The agent exited while starting; the message shows its screen.
    AgentTimeout
        Not ready within ``timeout``; the message says what was awaited and shows the screen.
    """
    deadline = time.monotonic() + timeout
    answered: dict[str, int] = {}
    quiet = not profile.detectors.ready and profile.detectors.input_line is None
    last_lines: tuple[str, ...] | None = None
    last_change = time.monotonic()
    ready_since: float | None = None
    last: tuple[str, float] | None = None  # the dialog answered last, and when
    first_ready: float | None = None  # when the screen first read ready
    while True:
        event = term.output_event()
        snap = await term.snapshot()
        reading = profile.detect(snap)
        if on_reading is not None:
            on_reading(reading)
        now = time.monotonic()
        if reading.state is AgentState.EXITED:
            msg = f"agent {name} exited while starting: {' | '.join(reading.evidence)}"
            raise AgentExited(msg)
        if reading.state is AgentState.DIALOG and reading.dialog:
            if last is not None and last[0] == reading.dialog and now - last[1] < _REANSWER:
                # Just answered: the screen may not have caught up yet. Answering again now
                # would press the keys into whatever comes next (the next dialog).
                await wait_event(event, last[1] + _REANSWER - now)
                continue
            count = answered.get(reading.dialog, 0)
            dialog = next(d for d in profile.dialogs if d.name == reading.dialog)
            if count < _MAX_ANSWERS:
                answered[reading.dialog] = count + 1
                await term.send_keys(*dialog.keys)
                last = (reading.dialog, time.monotonic())
                if say is not None:
                    say(f"{name}: answered the {dialog.name} dialog with {'+'.join(dialog.keys)}")
                if on_dialog is not None:
                    on_dialog(dialog.name, tuple(dialog.keys))
                ready_since = None
                await wait_event(event, 1.0)
                continue
        if reading.state is AgentState.READY:
            first_ready = now if first_ready is None else first_ready
            if now < min(first_ready + SESSION_GRACE, deadline) and _starting(receipts):
                await wait_event(event, _RECHECK)  # a receipt is a line in a file: look again
                continue
            settle = profile.dialog_settle if answered else 0.0
            ready_since = now if ready_since is None else ready_since
            if now - ready_since >= settle:
                return reading
            # Ready, but a dialog was just answered: look again when the screen changes or
            # the settle time is up, whichever comes first.
            await wait_event(event, min(ready_since + settle - now, max(deadline - now, 0)))
            if time.monotonic() >= deadline:
                return reading
            continue
        ready_since = None
        if snap.lines != last_lines:
            last_lines, last_change = snap.lines, now
        elif quiet and profile.quiescence and now - last_change >= profile.quiescence:
            reading = StateReading(AgentState.READY, tuple(snap.tail(1)), rule="quiet")
            if on_reading is not None:
                on_reading(reading)
            return reading
        if now >= deadline:
            screen = " | ".join(snap.tail(6))
            msg = (
                f"agent {name} not ready after {timeout:g}s (waited for its ready prompt; "
                f"it is {reading.state.value}); screen: {screen}"
            )
            raise AgentTimeout(msg)
        await wait_event(event, min(_RECHECK, deadline - now))


def _starting(receipts: Receipts | None) -> bool:
    """Whether a CLI whose hooks report its session start has not reported it yet."""
    if receipts is None or not receipts.reports(HookKind.SESSION):
        return False
    return not receipts.since(0, HookKind.SESSION)
