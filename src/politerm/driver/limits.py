"""Usage and rate limits: an agent that hit one waits for the reset, then goes on.

When the tracker reads LIMITED (the profile's ``limited`` detectors: "usage limit reached",
"API Error … (429)", "Quota exceeded"), the :class:`Limiter` of the agent's driver

1. records a ``limited`` event with the reset time: the one the screen names (the profile's
   ``limit_reset`` regexes), else ``wait`` seconds from now;
2. lets the agent's turn wait: :func:`~politerm.driver.turn.run_turn` and the router's step
   deadlines do not count the time spent LIMITED, and nothing else is typed into the agent;
3. at the reset (plus ``margin``) delivers the ``resume`` text ("continue") with the same
   confirmed delivery as any prompt, and records ``limit-resumed``. The agent's answer to
   it ends the turn as usual. A CLI that shows the limit in a menu (the profile's
   ``limit_dialog``: Claude's "What do you want to do?", Gemini's "Keep trying / Stop")
   gets that menu closed with its keys first.

The open limit is kept in the run store (:mod:`politerm.store.limits`): while it lasts the
expiry of messages queued for the agent stands still, ``poli status`` shows the reset time,
and a driver started later (a restarted router) takes the limit over with its start.

An agent that is still limited after ``max_resumes`` resumes in a row is reported STUCK
(a ``limit-gave-up`` event); any other state in between starts the count again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import typing as t

from politerm.agents.limits import reset_in_words
from politerm.agents.state import AgentState
from politerm.store.limits import begin_limit, end_limit, stored_limit

if t.TYPE_CHECKING:
    from politerm.agents.approval import ApprovalPolicy
    from politerm.agents.state import StateReading
    from politerm.config import Config
    from politerm.driver.agent import AgentDriver
    from politerm.driver.tokens import Budget

# Bounds on closing a CLI's limit menu: the screen's answer to each key, the menu gone.
_KEY_ECHO = 2.0
_MENU_GONE = 15.0
# The input box is back: idle, or idle under an error line (Gemini's "✕ [API Error: …]").
_TYPABLE = frozenset({AgentState.READY, AgentState.ERROR})


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


class Settings(t.TypedDict):
    """The ``policy``, ``limits`` and ``budget`` arguments of an agent driver."""

    policy: ApprovalPolicy
    limits: LimitPolicy
    budget: Budget


def driver_settings(config: Config) -> Settings:
    """The project's approval policy (``[routing]``), limits and budget for an agent driver."""
    from politerm.agents.approval import ApprovalPolicy
    from politerm.driver.tokens import Budget

    routing = config.routing
    return {
        "policy": ApprovalPolicy.of(routing.approval, routing.approval_patterns),
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
    #: Whether the store was asked for a limit an earlier driver of this agent left open.
    adopted: bool = False

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
        if not self.adopted:
            self._adopt(driver, reading)
        if reading.state is not AgentState.LIMITED:
            if self.active:
                driver.record("limit-over", task_id, f"{driver.name} is {reading.state}")
                self._end(driver, now)
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
            shown = reading.reset_at is not None
            self._begin(driver, now, self.until, shown=shown)
            said = "the screen says" if shown else "no time shown; waiting"
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
        self._end(driver, now)
        closed, menu = await self._close_menu(driver)
        if not closed:
            # Typing now would go into the menu (and clearing the box could quit the CLI):
            # wait again, counted as a resume.
            driver.record(
                "limit-resumed",
                task_id,
                f"{driver.name}: limit reset; {menu}nothing typed (resume {self.resumes})",
            )
            self._begin(driver, now, now + self.policy.wait, shown=False)
            return reading
        result = await driver.deliver(self.policy.resume)
        how = "delivered" if result.ok or result.submitted else f"NOT delivered ({result.rule})"
        driver.record(
            "limit-resumed",
            task_id,
            f"{driver.name}: limit reset; {menu}{self.policy.resume!r} {how} "
            f"(resume {self.resumes})",
        )
        return driver._tracker.reading

    def _adopt(self, driver: AgentDriver, reading: StateReading) -> None:
        """Take over the limit an earlier driver of this agent left open in the store."""
        if reading.state is AgentState.UNKNOWN:
            return  # a redraw frame says nothing: ask again at the next look
        self.adopted = True
        left = stored_limit(driver.store, driver.name) if driver.store is not None else None
        if left is None:
            return
        if reading.state is AgentState.LIMITED:
            self.since, self.until = left.since, left.until
            return
        driver.record("limit-over", None, f"{driver.name} is {reading.state} (limit left open)")
        self._end(driver, self.clock())

    def _begin(self, driver: AgentDriver, now: float, until: float, *, shown: bool) -> None:
        """A limit starts (or goes on): kept in the store, where the agent's clocks stop."""
        self.since, self.until = self.since or now, until
        if driver.store is not None:
            begin_limit(driver.store, driver.name, since=now, until=until, shown=shown)

    def _end(self, driver: AgentDriver, now: float) -> None:
        """The limit is over: the clocks it stopped run again (moved on by its length)."""
        self.since = self.until = None
        if driver.store is not None:
            end_limit(driver.store, driver.name, now)

    async def _close_menu(self, driver: AgentDriver) -> tuple[bool, str]:
        """Close the CLI's limit menu (the profile's ``limit_dialog``) when it is open.

        Each key is pressed once the screen answered the one before (bounded); then the
        menu must be gone and the input box back (READY or ERROR) within a bound, so that
        the resume text lands in the box (a half-drawn screen could make the delivery clear
        the box with keys that quit a CLI). Returns whether the agent can be typed into, and words
        for the event ("" for no menu).
        """
        dialog = driver.profile.limit_dialog
        snap = await driver.snapshot()
        if dialog is None or snap is None or not dialog.pattern.search("\n".join(snap.lines)):
            return True, ""
        for key in dialog.keys:
            echoed = driver.mark()
            await driver.press(key)
            await driver.changed(_KEY_ECHO, since=echoed)
            # A key right behind another's redraw is taken for a paste burst (Gemini CLI
            # drops such an Enter): the pause the profile keeps before a submit.
            await asyncio.sleep(driver.profile.submit_delay)
        deadline = self.clock() + _MENU_GONE
        while True:
            since = driver.mark()
            snap = await driver.snapshot()
            if snap is None or (
                not dialog.pattern.search("\n".join(snap.lines))
                and driver.profile.detect(snap, limited=False).state in _TYPABLE
            ):
                return True, f"its {dialog.name} menu closed ({'+'.join(dialog.keys)}); "
            if self.clock() >= deadline:
                return False, f"its {dialog.name} menu still open after {'+'.join(dialog.keys)}; "
            await driver.changed(max(0.0, deadline - self.clock()), since=since)

    def _stuck(self, reading: StateReading) -> StateReading:
        return dataclasses.replace(
            reading,
            state=AgentState.STUCK,
            rule=f"still limited after {self.resumes} resume(s)",
        )
