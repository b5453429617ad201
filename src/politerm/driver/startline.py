"""The order of one bring-up's starts: an agent whose CLI must start alone waits its turn.

Two opencode processes started at the same moment in a home where opencode never ran can
leave one stopped after its ``init`` step, blank for good (docs/realcli.md, opencode). A
profile says so with ``start_alone``: such an agent is launched only once the agent of the
same profile launched before it by the same bring-up is ready. Agents of other profiles,
and the first of each such profile, are launched at once and come up together, as before.
"""

from __future__ import annotations

import asyncio
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from politerm.agents.profile import AgentProfile
    from politerm.driver.agent import AgentDriver

#: Launches one agent (not waited for) and returns its driver.
Start = t.Callable[[], t.Awaitable["AgentDriver"]]


class StartLine:
    """Which agents of one bring-up wait for another before they are launched.

    The bring-up offers each agent to :meth:`defer` before launching it and launches the
    ones it does not take; :meth:`wait_ready` then waits them all ready and launches each
    deferred one when the one before it is ready.
    """

    def __init__(self) -> None:
        self._first: dict[str, str] = {}  # profile -> its agent launched at once
        self._queued: dict[str, list[tuple[str, Start]]] = {}  # profile -> the later ones

    def defer(self, profile: AgentProfile, name: str, start: Start) -> str | None:
        """Keep ``start`` for later if an agent of ``profile`` must start before it.

        Returns the name of the agent it waits for (``None``: launch it now). It waits for
        the last one of its profile offered before it.
        """
        if not profile.start_alone:
            return None
        queue = self._queued.get(profile.name)
        if queue is None and profile.name not in self._first:
            self._first[profile.name] = name
            return None
        before = queue[-1][0] if queue else self._first[profile.name]
        self._queued.setdefault(profile.name, []).append((name, start))
        return before

    async def wait_ready(
        self,
        drivers: dict[str, AgentDriver],
        ready: Callable[[AgentDriver], Awaitable[object]],
    ) -> None:
        """Wait every launched driver with ``ready``; launch the deferred ones in their turn.

        The deferred agents' drivers are added to ``drivers``. The first failure is raised,
        as :func:`asyncio.gather` raises it, once the waits still running are cancelled: the
        bring-up has failed, so an agent whose turn has not come is not launched.
        """
        waits = {name: asyncio.ensure_future(ready(d)) for name, d in drivers.items()}
        lines = [
            asyncio.ensure_future(self._line(waits[self._first[profile]], queue, drivers, ready))
            for profile, queue in self._queued.items()
        ]
        every = [*waits.values(), *lines]
        try:
            await asyncio.gather(*every)
        except BaseException:
            for task in every:
                task.cancel()
            await asyncio.gather(*every, return_exceptions=True)
            raise

    @staticmethod
    async def _line(
        before: asyncio.Future[object],
        queue: list[tuple[str, Start]],
        drivers: dict[str, AgentDriver],
        ready: Callable[[AgentDriver], Awaitable[object]],
    ) -> None:
        for name, start in queue:
            # Raises what the one before met: the bring-up failed, none is launched after it.
            await before
            drivers[name] = await start()
            before = asyncio.ensure_future(ready(drivers[name]))
        await before


__all__ = ["Start", "StartLine"]
