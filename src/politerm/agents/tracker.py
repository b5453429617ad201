"""One agent's state over time: detector readings made steady.

:meth:`AgentProfile.detect <politerm.agents.profile.AgentProfile.detect>` reads one
snapshot. A :class:`StateTracker` feeds it successive snapshots and adds what one screen
cannot tell:

- **READY latches** until input is sent (:meth:`StateTracker.input_sent`): a redraw that
  hides the input box for a frame reads UNKNOWN and must not flap the agent away from READY.
- **Quiescence**: with a profile ``quiescence``, a screen that decides nothing (UNKNOWN)
  and has not changed for that long counts as READY (programs with no prompt to read).
- **LIMITED** counts only a limit message that came after the last input: the lines showing
  one when input is sent are remembered, and only more of them read LIMITED again (the
  message that was answered with "continue" stays on the screen a while).
- **STUCK**: a message the agent cannot get past (the profile's ``stuck`` detectors), or no
  progress for the profile's ``stuck_after`` seconds while the agent is not ready, not
  waiting for someone, and not exited. Progress is judged on the screen minus spinners,
  timers and busy lines (:meth:`AgentProfile.progress_key`), since those move forever in
  an agent whose model call hangs.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.agents.limits import limit_lines
from politerm.agents.state import AgentState, StateReading

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.terminal import Snapshot

# States that wait for someone else (a person, the policy) and never count as stuck.
_WAITING = frozenset(
    {
        AgentState.READY,
        AgentState.WAITING_APPROVAL,
        AgentState.DIALOG,
        AgentState.LIMITED,
        AgentState.EXITED,
    }
)


@dataclasses.dataclass
class StateTracker:
    """Tracks one agent's state across snapshots.

    Parameters
    ----------
    profile
        The agent's profile: detectors, ``quiescence`` and ``stuck_after``.
    clock
        Monotonic seconds; tests pass a fake.

    Examples
    --------
    >>> from politerm.agents.profile import AgentProfile, Detectors
    >>> from politerm.terminal import Snapshot
    >>> prof = AgentProfile(name="x", detectors=Detectors(ready=["^> ?$"], busy=["working"]))
    >>> tr = StateTracker(prof, clock=lambda: 0.0)
    >>> tr.update(Snapshot(("> ",))).state.value
    'ready'
    >>> tr.update(Snapshot(("redrawing",))).state.value  # latched
    'ready'
    >>> tr.input_sent()
    >>> tr.update(Snapshot(("redrawing",))).state.value
    'unknown'
    """

    profile: AgentProfile
    clock: t.Callable[[], float] = time.monotonic
    state: AgentState = AgentState.STARTING
    reading: StateReading = dataclasses.field(
        default_factory=lambda: StateReading(AgentState.STARTING, rule="not looked yet")
    )
    since: float = 0.0
    ready_since: float = 0.0
    busy_seen: bool = False
    latched: bool = False
    _progress: tuple[str, ...] | None = None
    _progress_at: float = 0.0
    _screen: tuple[str, ...] | None = None
    _screen_at: float = 0.0
    _limit_lines: int = 0
    _limit_base: int = 0

    def update(self, snap: Snapshot, now: float | None = None) -> StateReading:
        """Read ``snap`` and return the tracked state with the evidence that decided it."""
        now = self.clock() if now is None else now
        raw = self.profile.detect(snap)
        if self.profile.detectors.limited:
            self._limit_lines = limit_lines(self.profile, snap)
            # Old limit lines scroll out of the region: the baseline follows them down.
            self._limit_base = min(self._limit_base, self._limit_lines)
            if raw.state is AgentState.LIMITED and self._limit_lines <= self._limit_base:
                raw = self.profile.detect(snap, limited=False)
        if snap.lines != self._screen:
            self._screen, self._screen_at = snap.lines, now
        progress = self.profile.progress_key(snap)
        if progress != self._progress:
            self._progress, self._progress_at = progress, now
        reading = self._judge(raw, now)
        self._set(reading, now)
        return self.reading

    def _judge(self, raw: StateReading, now: float) -> StateReading:
        prof = self.profile
        if raw.state is AgentState.UNKNOWN:
            if self.latched:
                return dataclasses.replace(
                    self.reading,
                    evidence=(*self.reading.evidence, "(latched: no input sent since)"),
                )
            quiet = now - self._screen_at
            if prof.quiescence and quiet >= prof.quiescence:
                return StateReading(
                    AgentState.READY,
                    (f"screen unchanged for {quiet:.1f}s", *raw.evidence[-1:]),
                    raw.input_text,
                    rule=f"quiet for {prof.quiescence:g}s",
                )
        if (
            raw.state not in _WAITING
            and raw.state is not AgentState.STUCK
            and prof.stuck_after
            and now - self._progress_at >= prof.stuck_after
        ):
            idle = now - self._progress_at
            return StateReading(
                AgentState.STUCK,
                (f"no progress for {idle:.0f}s (was {raw.state.value})", *raw.evidence),
                raw.input_text,
                rule=f"stuck_after {prof.stuck_after:g}s",
            )
        return raw

    def next_change(self) -> float | None:
        """When a look with no new output could change the verdict (``clock`` time).

        Silence alone turns an unreadable screen READY (``quiescence``) and a working
        agent STUCK (``stuck_after``); None when neither can happen, so only the agent's
        output (or a person, or the store) can change what a look would say.
        """
        prof = self.profile
        times = []
        if self.state is AgentState.UNKNOWN and not self.latched and prof.quiescence:
            times.append(self._screen_at + prof.quiescence)
        if self.state not in _WAITING and self.state is not AgentState.STUCK and prof.stuck_after:
            times.append(self._progress_at + prof.stuck_after)
        return min(times, default=None)

    def _set(self, reading: StateReading, now: float) -> None:
        if reading.state is not self.state:
            self.since = now
            if reading.state is AgentState.READY:
                self.ready_since = now
        if reading.state is AgentState.READY:
            self.latched = True
        elif reading.state is not AgentState.UNKNOWN:
            # Anything the screen says for sure (busy, a question, an exit) ends the latch.
            self.latched = False
        if reading.state is AgentState.BUSY:
            self.busy_seen = True
        self.state = reading.state
        self.reading = reading

    def force(self, reading: StateReading, now: float | None = None) -> None:
        """Take ``reading`` as the tracked state (the driver's limiter decided it)."""
        if reading is not self.reading:
            self._set(reading, self.clock() if now is None else now)

    def input_sent(self, now: float | None = None) -> None:
        """We typed into the agent: the ready latch ends, and progress starts counting."""
        now = self.clock() if now is None else now
        self.latched = False
        self.busy_seen = False
        self._progress_at = now
        self._limit_base = self._limit_lines
        self._set(StateReading(AgentState.UNKNOWN, ("input sent",), rule="input sent"), now)
