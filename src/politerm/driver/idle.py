"""Waiting until a running agent is idle (between turns), answering approvals on the way.

:meth:`AgentDriver.wait_ready` is for start-up (it answers dialogs and fails on a timeout);
a workflow that must not interrupt a busy agent — messaging delivers a request only to an
idle receiver, and watches its turn to the end — needs "wait until idle, or until something
else needs me", bounded, without failing. Each look is :meth:`AgentDriver.observe`, so
approval questions are answered by the driver's policy while waiting.
"""

from __future__ import annotations

import time
import typing as t

from politerm.agents.state import AgentState

if t.TYPE_CHECKING:
    from politerm.driver.agent import AgentDriver
    from politerm.driver.looking import Observation

# A look while nothing is printed: the state can change without output (a quiet exit).
_BACKSTOP = 2.0


async def wait_idle(
    driver: AgentDriver,
    timeout: float,
    *,
    settle: float = 0.0,
) -> Observation:
    """Look at the agent until it is READY (for ``settle`` seconds) or EXITED; return the look.

    Parameters
    ----------
    timeout
        Bound on the wait; the last look is returned when it runs out (check its state).
    settle
        How long READY must hold with no new output (after a prompt, a screen may show the
        old ready prompt for a moment before the agent starts working).
    """
    deadline = time.monotonic() + max(0.0, timeout)
    ready_since: float | None = None
    while True:
        since = driver.mark()
        obs = await driver.observe()
        now = time.monotonic()
        state = obs.state
        if state is AgentState.EXITED:
            return obs
        if state is AgentState.READY:
            ready_since = ready_since if ready_since is not None else now
            if now - ready_since >= settle:
                return obs
        else:
            ready_since = None
        if now >= deadline:
            return obs
        bound = min(_BACKSTOP, deadline - now)
        if ready_since is not None:
            bound = min(bound, ready_since + settle - now)
        await driver.changed(max(0.0, bound), since=since)
