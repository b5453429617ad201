"""The fleet's budget breaker in front of the turns a router types itself.

A node asks the fleet's breaker (:class:`~politerm.fleet.budget.FleetBudget`) before each
turn of the work it claims (:mod:`politerm.engine.node`). The agents placed where the
router runs are not claimed from the queue: the router types their turns itself. So the
router asks the same breaker before it types a new turn into one of them
(:class:`RouterBreaker`, what the router asks before it types a turn), and
tells it what they spent, from this machine's token counts. A turn held back is shown as a
node's paused work is: its task ``paused`` in ``poli status`` (with the breaker's reason),
events ``budget-paused`` and ``budget-resumed``, a line in ``poli fleet budget`` and ``poli
fleet status``. Its prompt stays queued (its step's clock stands still), and the breaker is
asked again every :data:`~politerm.engine.node.BUDGET_LOOK` seconds: once it allows a
turn (a cap raised or cleared, a reset, the next day), the agent's loop is woken and types
the same prompt, once.

Imported only when ``[fleet]`` is configured (it needs redis-py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
import typing as t

from politerm.driver.tokens import stored_tokens
from politerm.engine.fleetmeta import show_budget_pause
from politerm.engine.node import BUDGET_LOOK
from politerm.engine.nodelease import UNREACHABLE_BACKOFF
from politerm.errors import FleetError
from politerm.fleet.budget import HELD_PREFIX, Caps, FleetBudget
from politerm.protocol.usage import Usage

if t.TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from politerm.config import Config
    from politerm.store import RunStore

log = logging.getLogger(__name__)

__all__ = ["CHARGED", "HANDOFF_CREDIT", "RouterBreaker", "router_breaker"]

CHARGED: t.Final = "fleet-charged:"
"""Store meta: an agent's token count (``tokens:agent:NAME``) as last charged to the fleet."""
HANDOFF_CREDIT: t.Final = 2.0
"""Seconds a turn admitted for a handoff counts for the next ask, should the handoff not be
made (the block forwarded nothing after all, or its commit found the agent busy)."""


@dataclasses.dataclass
class _Held:
    """An agent whose new turns the breaker holds back."""

    reason: str
    label: str
    tasks: set[str | None]


class RouterBreaker:
    """The fleet's budget breaker for the agents one router drives (see the module docstring).

    Parameters
    ----------
    budget
        The fleet's breaker (the project's caps and counters in Redis).
    store
        This machine's run store (the agents' token counts; what ``poli status`` shows).
    node
        This machine's node name (named in the paused list).
    agents
        The agents the router drives.
    wake
        Wakes an agent's routing loop (when its turn may go on).
    """

    def __init__(
        self,
        budget: FleetBudget,
        store: RunStore,
        node: str,
        agents: Collection[str],
        wake: Callable[[str], None],
    ) -> None:
        self.budget, self.store, self.node = budget, store, node
        self.agents = tuple(agents)
        self.wake = wake
        self.held: dict[str, _Held] = {}
        self._credit: dict[str, float] = {}

    async def admit(self, agent: str, task_id: str | None, *, handoff: bool = False) -> bool:
        """Whether a new turn of ``agent`` (for ``task_id``) may be typed now; counted if so.

        False: its prompt waits (queued) and the agent's loop is woken when it may go on.
        ``handoff``: asked before a block's commit begins the delivery, which may not
        follow; the next ask within moments is then free.

        What the agent spent since it was last charged is charged first, in the same
        script, so its last turn counts against the caps its next one is asked about.
        Redis unreachable: nothing is typed (nothing proves the caps allow it), and the
        loop is woken again after :data:`~politerm.engine.nodelease.UNREACHABLE_BACKOFF`.
        """
        held = self.held.get(agent)
        if held is not None:
            held.tasks.add(task_id)
            show_budget_pause(self.store, agent, task_id, held.reason)
            return False
        if self._credit.pop(agent, -math.inf) > time.monotonic() - HANDOFF_CREDIT:
            return True
        spent, total = self._unpaid(agent)
        try:
            verdict = await asyncio.to_thread(self.budget.admit, agent, spent)
        except FleetError as exc:
            log.warning("router: asking the fleet's budget for %s: %s", agent, exc)
            asyncio.get_running_loop().call_later(UNREACHABLE_BACKOFF, self.wake, agent)
            return False
        if spent.total:
            self.store.set_meta(f"{CHARGED}{agent}", _encode(total))
        if verdict.ok:
            if handoff:
                self._credit[agent] = time.monotonic()
            return True
        await self._hold(agent, task_id, verdict.reason)
        return False

    def _unpaid(self, agent: str) -> tuple[Usage, Usage]:
        """What ``agent`` spent since it was last charged, and its count now.

        Its first ask on this machine takes the count as charged: what it spent before
        the fleet's breaker saw it is not the fleet's.
        """
        total = stored_tokens(self.store, f"agent:{agent}")
        raw = self.store.get_meta(f"{CHARGED}{agent}")
        if raw is None:
            self.store.set_meta(f"{CHARGED}{agent}", _encode(total))
            return Usage(), total
        was = _decode(raw)
        return Usage(max(0, total.input - was.input), max(0, total.output - was.output)), total

    async def _hold(self, agent: str, task_id: str | None, reason: str) -> None:
        label = f"{HELD_PREFIX}{task_id or agent}"
        self.held[agent] = _Held(reason, label, {task_id})
        show_budget_pause(self.store, agent, task_id, reason)
        try:
            await asyncio.to_thread(self.budget.hold, label, agent, self.node, reason)
        except FleetError as exc:
            log.warning("router: listing %s's turn as paused: %s", agent, exc)

    async def run(self) -> None:
        """Ask the breaker, for each agent held back, whether its turns may go on (forever)."""
        with contextlib.suppress(FleetError):
            # A router killed while it held a turn back left its line behind.
            await asyncio.to_thread(self.budget.release)
        while True:
            await asyncio.sleep(BUDGET_LOOK)
            for agent, held in list(self.held.items()):
                try:
                    verdict = await asyncio.to_thread(self.budget.peek, agent)
                    if verdict.ok:
                        await asyncio.to_thread(self.budget.release, [held.label])
                except FleetError as exc:
                    log.warning("router: asking the fleet's budget for %s: %s", agent, exc)
                    continue
                if verdict.ok:
                    del self.held[agent]
                    for task_id in held.tasks:
                        show_budget_pause(self.store, agent, task_id, None)
                    self.wake(agent)

    def close(self) -> None:
        """Charge what the agents spent since last charged, take held turns off the list."""
        try:
            for agent in self.agents:
                spent, total = self._unpaid(agent)
                if spent.total:
                    self.budget.charge(agent, spent)
                    self.store.set_meta(f"{CHARGED}{agent}", _encode(total))
            self.budget.release([h.label for h in self.held.values()])
        except FleetError as exc:
            log.warning("router: settling the fleet's budget: %s", exc)


def _encode(usage: Usage) -> str:
    return f"{usage.input},{usage.output}"


def _decode(raw: str) -> Usage:
    """A count as :func:`_encode` wrote it (anything else reads as nothing spent).

    Examples
    --------
    >>> _decode("12,3"), _decode("junk")
    (Usage(input=12, output=3, cached=0), Usage(input=0, output=0, cached=0))
    """
    try:
        inp, out = (int(x) for x in raw.split(","))
    except ValueError:
        return Usage()
    return Usage(inp, out)


@contextlib.asynccontextmanager
async def router_breaker(
    config: Config, store: RunStore, agents: Collection[str], wake: Callable[[str], None]
) -> t.AsyncIterator[RouterBreaker | None]:
    """The breaker in front of the turns of a router's own ``agents`` (None without a fleet)."""
    if config.fleet is None or not agents:
        yield None
        return
    from politerm.engine.fleetlink import open_queue

    queue = open_queue(config, store)
    budget = FleetBudget(queue, Caps.from_config(config.fleet.budget))
    breaker = RouterBreaker(budget, store, config.fleet.node, agents, wake)
    looks = asyncio.create_task(breaker.run(), name="router-budget")
    try:
        yield breaker
    finally:
        looks.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await looks
        breaker.close()
        queue.conn.close()
