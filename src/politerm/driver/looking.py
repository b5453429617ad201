"""Looking at an agent: one observation, and watching until a condition holds.

:func:`watch` is the driver's one bounded, event-driven look-until loop for a workflow that
waits for something the driver has no dedicated call for (a diagnostic's plain reply, say):
it sleeps on the agent's output, looks with :meth:`AgentDriver.observe` (approvals answered
by policy on the way) and asks the caller's predicate.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.agents.state import AgentState

if t.TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from politerm.agents.state import StateReading
    from politerm.driver.agent import AgentDriver
    from politerm.hooks.events import HookEvent
    from politerm.terminal import Snapshot

T = t.TypeVar("T")
# Longest sleep without output: agent ready (an answer may be silence) / not.
_READY_BOUND = 0.5
_BUSY_BOUND = 2.0


@dataclasses.dataclass(frozen=True)
class Mark:
    """A moment of the agent's output (:meth:`AgentDriver.mark`): what a wait counts from."""

    _output: asyncio.Event


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at the agent: the screen, the tracked state, what the approver did."""

    snap: Snapshot
    reading: StateReading
    approval: str = "none"
    hook_approval: HookEvent | None = None
    """The agent's own notification that a permission question is open (its hooks)."""

    @property
    def state(self) -> AgentState:
        """The tracked state."""
        return self.reading.state


async def watch(
    driver: AgentDriver,
    until: Callable[[Observation], T | None],
    *,
    timeout: float,
    what: str,
    task_id: str | None = None,
) -> T:
    """Look at ``driver``'s agent on each output until ``until(observation)`` is not None.

    Approval questions are answered by the driver's policy on the way (each look is an
    :meth:`~politerm.driver.AgentDriver.observe`); ``until`` sees every observation, the
    approver's action included.

    Raises
    ------
    AgentExited
        The agent exited first; the message names ``what`` and shows its screen.
    AgentTimeout
        ``timeout`` seconds passed; the message names ``what``, the state and the screen.
    """
    from politerm.errors import AgentExited, AgentTimeout

    deadline = time.monotonic() + timeout
    while True:
        since = driver.mark()
        obs = await driver.observe(task_id=task_id)
        got = until(obs)
        if got is not None:
            return got
        screen = " | ".join(ln.strip() for ln in obs.snap.lines if ln.strip())[-300:]
        if obs.state is AgentState.EXITED:
            msg = f"agent {driver.name} exited while waiting for {what}: {screen}"
            raise AgentExited(msg)
        now = time.monotonic()
        if now >= deadline:
            msg = (
                f"agent {driver.name}: no {what} within {timeout:g}s "
                f"(it is {obs.state.value}); screen: {screen}"
            )
            raise AgentTimeout(msg)
        # Output ends the wait; the bound covers what silence alone changes.
        bound = _READY_BOUND if obs.state is AgentState.READY else _BUSY_BOUND
        change = driver._tracker.next_change()
        if change is not None:
            bound = min(bound, max(0.05, change - now))
        await driver.changed(min(bound, deadline - now), since=since)
