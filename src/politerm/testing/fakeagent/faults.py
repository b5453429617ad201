"""Seeded fault decisions for the fake agent (the scenario's ``[faults]`` table).

Every decision that injects a fault is written to the agent's own log as a ``fault``
event before it takes effect, so a chaos run can tell a fault the agent caused from one
politerm caused. Counters that must hold over restarts (``crash_max``, ``crash_after``)
are read back from the same log: an agent restarted by ``poli up --resume`` with the same
``--log`` remembers that it already crashed.
"""

from __future__ import annotations

import random
import typing as t

from politerm.testing.fakeagent.eventlog import read_log

if t.TYPE_CHECKING:
    from politerm.testing.fakeagent.eventlog import EventLog
    from politerm.testing.fakeagent.scenario import CrashAt, Faults


class FaultPlan:
    """Draws and logs the faults one agent process injects.

    Parameters
    ----------
    faults
        The knobs.
    log
        The agent's event log (read once for its history, then appended to).
    name
        The agent's name; part of the seed so two agents with one scenario differ.

    Examples
    --------
    >>> from politerm.testing.fakeagent.eventlog import EventLog
    >>> from politerm.testing.fakeagent.scenario import Faults
    >>> plan = FaultPlan(Faults(seed=1, lose_enter=1.0), EventLog(None), "A")
    >>> plan.lose_enter(), FaultPlan(Faults(), EventLog(None), "A").lose_enter()
    (True, False)
    """

    def __init__(self, faults: Faults, log: EventLog, name: str) -> None:
        self.faults = faults
        self.log = log
        history = read_log(log.path) if log.path is not None and log.path.exists() else []
        starts = sum(1 for e in history if e.get("event") == "start")
        self.crashes = sum(
            1 for e in history if e.get("event") == "fault" and e.get("kind") == "crash"
        )
        self.prompts_before = sum(1 for e in history if e.get("event") == "prompt")
        self.answers_lost = sum(
            1 for e in history if e.get("event") == "fault" and e.get("kind") == "lost_answer"
        )
        self.rng = random.Random(f"{faults.seed}:{name}:{starts}")

    def _draw(self, share: float) -> bool:
        return self.rng.random() < share

    def lose_enter(self) -> bool:
        """Whether this submitting Enter press is lost (logged as ``swallowed_enter``)."""
        return self._draw(self.faults.lose_enter)

    def crash(self, at: CrashAt, n: int) -> bool:
        """Whether to crash now, at moment ``at`` on the agent's ``n``-th prompt.

        ``n`` counts this process's prompts; ``crash_after`` counts the whole log's.
        """
        f = self.faults
        if f.crash_at is not at or self.crashes >= f.crash_max:
            return False
        if self.prompts_before + n <= f.crash_after or not self._draw(f.crash_share):
            return False
        self.crashes += 1
        self.log.write("fault", kind="crash", at=at.value, n=n)
        return True

    def freeze(self, n: int) -> float:
        """Seconds turn ``n`` stops reading input and drawing (0 for none)."""
        if not self._draw(self.faults.freeze_share):
            return 0.0
        self.log.write("fault", kind="freeze", n=n, seconds=self.faults.freeze_seconds)
        return self.faults.freeze_seconds

    def slow(self, n: int) -> float:
        """Extra think time of turn ``n`` (0 for none)."""
        if not self._draw(self.faults.slow_share):
            return 0.0
        self.log.write("fault", kind="slow", n=n, seconds=self.faults.slow_seconds)
        return self.faults.slow_seconds

    def lose_answer(self, n: int) -> bool:
        """Whether the keys answering turn ``n``'s question are lost (it stays on screen).

        A CLI that reads keys before its question listens drops them; the first
        ``lose_answers`` answers over the log's life are.
        """
        if self.answers_lost >= self.faults.lose_answers:
            return False
        self.answers_lost += 1
        self.log.write("fault", kind="lost_answer", n=n)
        return True

    def leave_text(self, n: int) -> str | None:
        """Text to leave in the input box after turn ``n``, or ``None``."""
        if not self._draw(self.faults.leave_text_share):
            return None
        self.log.write("fault", kind="leave_text", n=n, text=self.faults.leave_text)
        return self.faults.leave_text
