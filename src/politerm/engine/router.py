"""The router: moves tagged messages between agent panes until each task is done.

Everything it decides is written to the run store before it acts, so a router killed at any
moment and started again picks up where the store says it was: a message is marked delivered
only on confirmed delivery, a block re-read after a restart changes nothing twice (every
effect is idempotent on the block's dedupe key), and a prompt whose delivery was cut short
is settled on the agent's screen before anything else is sent to it. A router that stops
for any other reason than ``kill -9`` lets each agent's step under way (a delivery, say)
finish before it returns.

It is event-driven: each agent's loop sleeps on that pane's ``%output`` event (or a store
change, or its next deadline) and reads the screen only when something happened. Each
agent is driven through its :class:`~politerm.driver.AgentDriver`; the router keeps only
the routing: its decisions (:mod:`politerm.engine.decide`, :mod:`politerm.engine.agentstep`),
the facts they need gathered by turns and blocks (:mod:`politerm.engine.effects`), deadlines
(:mod:`politerm.engine.deadlines`), sending and settling (:mod:`politerm.engine.sending`),
and every side effect carried out in one place (:mod:`politerm.engine.execute`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import typing as t
import zlib

from politerm._internal.aio import wait_any
from politerm.agents.state import AgentState
from politerm.engine import agentstep
from politerm.engine.agentstep import IDLE_BACKSTOP
from politerm.engine.deadlines import Deadlines
from politerm.engine.decide import FOLLOW_UPS
from politerm.engine.effects import BlockEffects
from politerm.engine.execute import At, Executor
from politerm.engine.remote import RemoteTurns
from politerm.engine.sending import Sending, handed
from politerm.errors import (
    ControlModeError,
    PaneNotFound,
    PolitermError,
    ServerNotRunning,
    TmuxLookupError,
)
from politerm.store.models import TaskState, TurnEnd, TurnState
from politerm.store.watch import EventCursor, StoreWatch, agents_with_work

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, Observation
    from politerm.engine.fleetboard import BoardFeed
    from politerm.engine.fleetlink import FleetPost
    from politerm.engine.routebase import Routing
    from politerm.store.models import Task, Turn

log = logging.getLogger(__name__)

__all__ = ["Router", "idle_backstop"]

# After a turn, an agent with a transcript is looked at this often for this long: the
# transcript's copy of the answer (cross-checked) is a file write, which wakes no one.
TRANSCRIPT_GRACE = 30.0
# Full store scan (new tasks, deadlines, expiry) on every commit (store notification), and at
# least this often while a task is in flight (deadlines are time, not events).
SCAN_EVERY = 1.0
# With nothing in flight the router sleeps until a commit; this only bounds a lost
# notification (and how late the caller's until() is asked without one).
IDLE_TICK = 30.0
# How long a stopping router waits for the steps under way (deliveries) to finish, and
# for its last look at each open turn's screen.
STOP_GRACE = 60.0
LAST_LOOK = 10.0


def _unsettled(driver: AgentDriver) -> str:
    """Why a last look at ``driver``'s turn did not end within :data:`LAST_LOOK`."""
    state = driver.state.value.replace("_", " ")
    pending = driver.pending_approval
    asking = f" ({pending.what})" if pending is not None else ""
    return (
        f"its block takes effect once it is idle, and it was still {state}{asking} after "
        f"{LAST_LOOK:g}s; the next router reads the turn again"
    )


def idle_backstop(name: str) -> float:
    """The idle bound of agent ``name``'s loop: :data:`IDLE_BACKSTOP` to 1.5 times that.

    Spread by name, so the backstop looks of many idle agents started together do not all
    fall in the same second (500 agents: one burst of 500 screen reads every 5 minutes,
    which a handoff under way would wait behind), and stable per agent.

    Examples
    --------
    >>> idle_backstop("IDLE001") == idle_backstop("IDLE001")
    True
    >>> IDLE_BACKSTOP <= idle_backstop("IDLE001") < 1.5 * IDLE_BACKSTOP
    True
    """
    spread = zlib.crc32(name.encode()) % 1000 / 2000
    return IDLE_BACKSTOP * (1 + spread)


class Router:
    """Routes messages between the agents of one session.

    Composed of its parts, each an object with its own interface: :class:`Routing` (the
    shared state), :class:`Executor` (every side effect), :class:`Deadlines`,
    :class:`Sending` and :class:`BlockEffects`; the decisions they gather facts for are
    :mod:`politerm.engine.decide`'s and :mod:`politerm.engine.agentstep`'s.

    Parameters
    ----------
    routing
        What it routes: the configuration, the store, the agents and the templates, and
        the agents hosted on other nodes of the fleet.
    post
        The fleet's queue, through which those agents' turns go
        (:mod:`politerm.engine.remote`).
    states
        Those agents' states as their nodes publish them (a question asked there shows
        on the task here).
    """

    def __init__(
        self,
        routing: Routing,
        *,
        post: FleetPost | None = None,
        states: BoardFeed | None = None,
    ) -> None:
        self.routing, self.config, self.store = routing, routing.config, routing.store
        self.agents, self.loops = routing.agents, routing.loops
        self.executor = Executor(routing)
        self.deadlines = Deadlines(routing, self.executor)
        self.sending = Sending(routing, self.executor)
        self.effects = BlockEffects(routing, self.executor, self.sending)
        self.remote = (
            RemoteTurns(routing, self.executor, self.sending, self.effects, post, states)
            if post is not None
            else None
        )
        self._data_version = -1
        self._next_scan = 0.0
        self._in_flight = True
        self._events: EventCursor | None = None

    def wake(self, name: str) -> None:
        """Wake one agent's loop."""
        self.routing.wake(name)

    def stop(self) -> None:
        """Ask every loop to finish (a step under way completes first)."""
        self.routing.stop()

    @property
    def fatal(self) -> str | None:
        """Why routing stopped for good (tmux server gone), if it did."""
        return self.routing.fatal

    async def run(self, *, until: t.Callable[[], bool] | None = None) -> None:
        """Route until :meth:`stop`, a fatal error, or ``until()`` turns true.

        Each agent's step under way finishes before this returns (bounded by
        ``STOP_GRACE``); a delivery cut short anyway stays DELIVERING, and the next router
        settles it from the screen.

        Raises
        ------
        ServerNotRunning
            When the tmux server died; every active task is failed with that message first.
        """
        self._data_version = -1
        self._next_scan = 0.0
        self._in_flight = True
        loops = [
            asyncio.create_task(self._agent_loop(d), name=f"agent-{d.name}")
            for d in self.routing.agents.values()
        ]
        if self.remote is not None:
            loops += [
                asyncio.create_task(self.remote.run(name), name=f"remote-{name}")
                for name in sorted(self.routing.remote)
            ]
        # Woken by commits (any process) instead of a timer; see politerm.store.watch.
        watch = StoreWatch(self.store.path)
        await watch.start()
        self._events = EventCursor(self.store)
        try:
            while not self.routing.stopping.is_set():
                committed = watch.event()
                await self._tick()
                if self.routing.fatal is not None:
                    break
                if until is not None and until():
                    break
                bound = SCAN_EVERY if self._in_flight else IDLE_TICK
                await wait_any(self.routing.stopping, committed, timeout=bound)
                self._next_scan = 0.0 if committed.is_set() else self._next_scan
        finally:
            await watch.close()
            self.stop()
            _, late = await asyncio.wait(loops, timeout=STOP_GRACE) if loops else ((), ())
            for task in late:
                task.cancel()
            for task in loops:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.routing.fatal is None:
                await self._last_look()
        if self.routing.fatal is not None:
            raise ServerNotRunning(self.routing.fatal)

    async def _last_look(self) -> None:
        """Read each open turn's answer already on screen once more before stopping.

        An answer printed just before a stop would otherwise live only on that screen: if
        the agent or the tmux server dies before the next router reads it, the resume would
        have to send its prompt again.
        """
        for driver in self.routing.agents.values():
            turn = self.store.current_turn(driver.name)
            if driver.dead or turn is None or turn.state is TurnState.DELIVERING:
                continue
            try:
                async with asyncio.timeout(LAST_LOOK):
                    await self._look_until_applied(driver, turn)
            except TimeoutError:
                log.warning(
                    "agent %s: no last look at its turn: %s", driver.name, _unsettled(driver)
                )
            except PolitermError as exc:
                why = str(exc) or type(exc).__name__
                log.warning("agent %s: no last look at its turn: %s", driver.name, why)

    async def _look_until_applied(self, driver: AgentDriver, turn: Turn) -> None:
        # A block that ends the turn waits until the agent is idle (its spinner may still
        # show for a moment after the answer): look again on its next output.
        while True:
            since = driver.mark()
            obs = await driver.observe(task_id=turn.task_id)
            if obs.state is AgentState.EXITED:
                return
            await self.effects.scan_turn(driver, turn, obs)
            current = self.store.current_turn(driver.name)
            # A block seen once waits for a second look (BlockParser settle) before it counts.
            waiting = self.routing.loops[driver.name].held or driver.blocks_settling
            if not waiting or current is None or current.nonce != turn.nonce:
                return
            await driver.changed(0.25, since=since)

    # --- the loops ------------------------------------------------------------------------

    async def _agent_loop(self, driver: AgentDriver) -> None:
        loop = self.routing.loops[driver.name]
        # A delivery handed to this loop is typed even when the router is stopping.
        while not driver.dead and (not self.routing.stopping.is_set() or loop.handoff is not None):
            since = driver.mark()
            loop.wake.clear()
            try:
                # The service's message lanes type into the same driver: one at a time.
                async with driver.typing:
                    await self._step(driver)
            except (PaneNotFound, ControlModeError) as exc:
                log.warning("agent %s: %s", driver.name, exc)
                gone = driver.host_gone()
                if gone is not None:
                    self._host_gone(driver, gone)
                    return
            except ServerNotRunning as exc:
                self._host_gone(driver, str(exc))
                return
            except TmuxLookupError as exc:
                # tmux did not answer in time; look again at the next wake-up.
                log.warning("agent %s: %s", driver.name, exc)
            except asyncio.CancelledError:
                self._handed_back(driver)
                raise
            except Exception:  # a crashed agent loop would silently stop routing to it
                log.exception("agent %s: routing step failed; retrying", driver.name)
                self.store.add_event("error", agent=driver.name, detail="routing step failed")
                await asyncio.sleep(0.5)
            if self.routing.stopping.is_set() and loop.handoff is None:
                return
            if loop.handoff is not None:
                continue
            await driver.changed(self._sleep_for(driver), since=since, wake=loop.wake)
            await asyncio.sleep(0)  # let the other loops run between bursts

    def _host_gone(self, driver: AgentDriver, why: str) -> None:
        """A tmux server died: its agents are dead; routing stops once every server is gone.

        A session with many agents spans several servers (``[tmux] shard_size``); the
        agents on the others go on.
        """
        agents = self.routing.agents.values()
        gone = {driver.name} | {d.name for d in agents if d.host_gone() is not None}
        if len(gone) == len(agents):
            self.executor.server_gone(why)
            return
        for name in sorted(gone):
            self.executor.agent_died(name, [f"its tmux server is gone: {why}"])
            self.routing.wake(name)  # its loop sees the death now, not at its backstop

    def _handed_back(self, driver: AgentDriver) -> None:
        for _row, msg in handed(self.store, driver.name):
            self.store.add_event(
                "handed-back",
                task_id=msg.task_id,
                agent=driver.name,
                detail=f"{msg.type} message left mid-delivery by a stopping router; "
                "the next router settles it from the screen",
            )

    def _sleep_for(self, driver: AgentDriver) -> float:
        # Output, a store change, tmux's pane-death notification or the router's own wake
        # call end every sleep; the bound only covers what no event announces.
        loop = self.routing.loops[driver.name]
        seen = loop.turn_seen + TRANSCRIPT_GRACE if driver.profile.transcript else None
        return agentstep.sleep_bound(
            agentstep.Sleep(
                now=time.monotonic(),
                idle_bound=idle_backstop(driver.name),
                limit_due=driver.limit_due_in(),
                turn_open=loop.turn_nonce is not None,
                settling=driver.blocks_settling,
                block_settle=driver.profile.block_settle,
                state=driver.state,
                retry_at=loop.retry_at,
                transcript_until=seen,
                next_change=driver.next_change(),
            )
        )

    async def _step(self, driver: AgentDriver) -> None:
        name = driver.name
        loop = self.routing.loops[name]
        if loop.handoff is not None:
            # Begun in the commit of the block that forwarded it: type it now.
            begun, loop.handoff = loop.handoff, None
            await self.sending.send_handoff(driver, begun)
            return
        turn = self.store.current_turn(name)
        # The state row the look brings joins this step's own commit (a block's effects,
        # a delivery begun), or is written when the step ends.
        obs = await driver.observe(task_id=turn.task_id if turn else None, defer_row=True)
        try:
            await self._after_look(driver, turn, obs)
        finally:
            driver.record_row()

    async def _after_look(self, driver: AgentDriver, turn: Turn | None, obs: Observation) -> None:
        name = driver.name
        loop = self.routing.loops[name]
        task = self.store.get_task(turn.task_id) if turn is not None and turn.task_id else None
        first = agentstep.after_look(
            agentstep.Look(
                state=obs.state,
                settled=loop.settled,
                in_flight=not loop.settled and bool(handed(self.store, name)),
                clear_pending=name in self.routing.clear_later,
                turn_task=turn.task_id if turn is not None else None,
                task_state=task.state if task is not None else None,
            )
        )
        if obs.state is not AgentState.EXITED:
            loop.settled = True
        match first:
            case agentstep.AgentDied():
                self.executor.carry((first,), At(name, evidence=obs.reading.evidence))
                return
            case agentstep.Settle():
                # A delivery a previous router left half-done comes before anything else.
                await self.sending.settle_in_flight(driver, obs.snap)
                return
            case agentstep.ClearBox():
                self.routing.clear_later.discard(name)
                await driver.clear_input()
                return
            case agentstep.EndStale():
                self.executor.carry((first,), At(name, turn=turn))
                turn = None
        loop.turn_nonce = turn.nonce if turn else None
        if turn is not None:
            if not await self._in_turn(driver, turn, task, obs):
                return
            turn = self.store.current_turn(name)
            loop.turn_nonce = turn.nonce if turn else None
        elif driver.profile.transcript is not None:
            # The turn was answered on screen; the transcript may still be catching up, and
            # its copy of the block is cross-checked when it arrives.
            driver.follow_transcript(loop.last_nonce if self.routing.nonce_required else None)
        if turn is not None and turn.state is TurnState.WAITING:
            self.effects.answered_silently(driver, turn, obs.snap)
            turn = self.store.current_turn(name)
        retry_in = None if loop.retry_at is None else loop.retry_at - time.monotonic()
        send = agentstep.next_send(driver.state, retry_in, turn is not None)
        if send is None:
            return
        loop.retry_at = None
        if send.follow_ups_only and turn is not None:
            # One prompt at a time: only this turn's own nudge or retry may go now.
            msg = self.store.next_queued(name, task_id=turn.task_id, types=FOLLOW_UPS)
        else:
            msg = self.store.next_queued(name)
        if msg is None:
            return
        gate = self.routing.gate
        if turn is None and gate is not None and not await gate.admit(name, msg.task_id):
            return  # a new turn the gate holds back: its prompt stays queued
        await self.sending.deliver(driver, msg, turn, obs.snap)

    async def _in_turn(
        self, driver: AgentDriver, turn: Turn, task: Task | None, obs: Observation
    ) -> bool:
        """The open turn: its approval on its task, its budget, its blocks; False: over budget."""
        loop = self.routing.loops[driver.name]
        loop.last_nonce = turn.nonce
        loop.turn_seen = time.monotonic()
        if task is not None:
            self.effects.approval_task_state(driver, task, obs)
        if await self._over_budget(driver, turn):
            return False
        await self.effects.scan_turn(driver, turn, obs)
        return True

    async def _over_budget(self, driver: AgentDriver, turn: Turn) -> bool:
        """Count the turn's tokens; over a ``[budget]`` cap, interrupt it and fail its task."""
        over = driver.over_budget()
        if over is None or turn.task_id is None:
            return False
        await driver.press(driver.profile.interrupt_key)
        self.store.add_event(
            "budget", task_id=turn.task_id, agent=driver.name, detail=f"turn ended: {over}"
        )
        self.executor.fail(turn.task_id, over, reason=TurnEnd.OVER_BUDGET)
        return True

    # --- the store tick: new tasks, deadlines, aborts -------------------------------------

    async def _tick(self) -> None:
        version = self.store.data_version()
        now = time.monotonic()
        if version != self._data_version:
            # Another process committed: wake only the loops it gave something to do.
            self._data_version = version
            for name in agents_with_work(
                self.store, self.routing.names, self._events.read() if self._events else ()
            ):
                self.routing.wake(name)
        elif now < self._next_scan:
            return
        self._next_scan = now + SCAN_EVERY
        active = self.store.list_tasks(active_only=True)
        self._in_flight = bool(active) or bool(self.store.list_expectations())
        for task in active:
            if task.state is TaskState.PENDING:
                self.executor.start_task(task)
        self.deadlines.check(time.time())
        for msg in self.store.expire_messages(time.time()):
            self.routing.event("dead-letter", msg, detail="ttl expired")
