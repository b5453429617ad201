"""Usage and rate limits: an agent that hit one waits for the reset, then goes on.

When the tracker reads LIMITED (the profile's ``limited`` detectors: "usage limit reached",
"API Error … (429)", "Quota exceeded"), the :class:`Limiter` of the agent's driver

1. records a ``limited`` event with the reset time: the one the screen names (the profile's
   ``limit_reset`` regexes), else ``wait`` seconds from now;
2. lets the agent's turn wait: :func:`~politerm.driver.turn.run_turn` and the router's step
   deadlines do not count the time spent LIMITED, and nothing else is typed into the agent;
3. at the reset (plus ``margin``) delivers the ``resume`` text ("continue") with the same
   confirmed delivery as any prompt, and records ``limit-resumed``. The agent's answer to
   it ends the turn as usual.

An agent that is still limited after ``max_resumes`` resumes in a row is reported STUCK
(a ``limit-gave-up`` event); any other state in between starts the count again.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.agents.limits import reset_in_words
from politerm.agents.state import AgentState

if t.TYPE_CHECKING:
    from politerm.agents.state import StateReading
    from politerm.config import Config
    from politerm.driver.agent import AgentDriver


@dataclasses.dataclass(frozen=True)
class LimitPolicy:
    """What to do about a limit (the ``[limits]`` configuration section).

    Attributes
    ----------
    resume
        The text delivered at the reset.
    wait
        Seconds to wait when the screen does not say when the limit resets.
    margin
        Seconds after the reset before the resume text is sent.
    max_resumes
        Resumes in a row that may meet the limit again before the agent counts as STUCK.
    """

    resume: str = "continue"
    wait: float = 300.0
    margin: float = 5.0
    max_resumes: int = 5


def driver_settings(config: Config) -> dict[str, t.Any]:
    """The ``limits`` and ``budget`` arguments of an agent driver, from the configuration."""
    from politerm.driver.tokens import Budget

    return {
        "limits": LimitPolicy(**config.limits.model_dump()),
        "budget": Budget(**config.budget.model_dump()),
    }


@dataclasses.dataclass
class Limiter:
    """One agent's limit: since when, until when, how many resumes were sent."""

    policy: LimitPolicy = dataclasses.field(default_factory=LimitPolicy)
    clock: t.Callable[[], float] = time.time
    since: float | None = None
    until: float | None = None
    resumes: int = 0
    given_up: bool = False

    @property
    def active(self) -> bool:
        """The agent is waiting for a limit to reset."""
        return self.since is not None

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until the resume text is due (None when no limit is active)."""
        if self.until is None:
            return None
        now = self.clock() if now is None else now
        return max(0.0, self.until + self.policy.margin - now)

    async def look(
        self, driver: AgentDriver, reading: StateReading, task_id: str | None
    ) -> StateReading:
        """Act on one reading of the agent's state; return the reading to record.

        A limit that outlasts ``max_resumes`` resumes turns the reading into STUCK.
        """
        now = self.clock()
        if reading.state is not AgentState.LIMITED:
            if self.active:
                driver.record("limit-over", task_id, f"{driver.name} is {reading.state}")
                self.since = self.until = None
            if reading.state not in (AgentState.UNKNOWN, AgentState.LIMITED):
                self.resumes, self.given_up = 0, False
            return reading
        if self.given_up:
            return self._stuck(reading)
        if not self.active:
            self.since = now
            self.until = (
                reading.reset_at if reading.reset_at is not None else now + self.policy.wait
            )
            said = "the screen says" if reading.reset_at is not None else "no time shown; waiting"
            driver.record(
                "limited",
                task_id,
                f"{driver.name} hit a limit ({reading.rule}): {' | '.join(reading.evidence)}; "
                f"resets at {reset_in_words(self.until, now)} ({said})",
            )
            return reading
        if (self.due_in(now) or 0.0) > 0:
            return reading
        if self.resumes >= self.policy.max_resumes:
            self.given_up = True
            driver.record(
                "limit-gave-up",
                task_id,
                f"{driver.name} is still limited after {self.resumes} resume(s)",
            )
            return self._stuck(reading)
        self.resumes += 1
        self.since = self.until = None
        result = await driver.deliver(self.policy.resume)
        how = "delivered" if result.ok or result.submitted else f"NOT delivered ({result.rule})"
        driver.record(
            "limit-resumed",
            task_id,
            f"{driver.name}: limit reset; {self.policy.resume!r} {how} (resume {self.resumes})",
        )
        return driver.tracker.reading

    def _stuck(self, reading: StateReading) -> StateReading:
        return dataclasses.replace(
            reading,
            state=AgentState.STUCK,
            rule=f"still limited after {self.resumes} resume(s)",
        )
