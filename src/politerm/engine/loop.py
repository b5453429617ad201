"""The Planner⇄Executer loop as library calls: submit, route, follow, answer, abort.

The CLI commands are thin wrappers around these functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import typing as t

from politerm._internal.ids import check_id
from politerm.engine import service
from politerm.engine.decide import ACTIVE, PLANNER
from politerm.engine.placement import here_config
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.engine.session import RouterLock, Session
from politerm.engine.templates import Templates
from politerm.errors import RoutingError, StaleAction
from politerm.store.models import MessageState, TaskState, TurnEnd
from politerm.store.watch import EventCursor, StoreWatch

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.driver import AgentDriver, Host
    from politerm.engine.fleetboard import BoardFeed
    from politerm.engine.fleetbudget import RouterBreaker
    from politerm.engine.fleetlink import FleetPost, RouterSeat
    from politerm.store import RunStore
    from politerm.store.models import Event, Task

Printer = t.Callable[["Event"], None]
Beside = t.Callable[
    ["t.Mapping[str, AgentDriver]", "Host", "RouterBreaker | None"], t.Coroutine[t.Any, t.Any, None]
]
"""Work a router runs beside its loops over its own drivers (the message lanes), asking
the router's gate (the fleet's budget) before a turn of one of them."""
Serve = t.Callable[[t.Callable[[], bool]], t.Coroutine[t.Any, t.Any, None]]
"""Routes the session here until its argument turns true (with the message lanes)."""
TERMINAL = frozenset({TaskState.DONE, TaskState.FAILED, TaskState.ABORTED})


def new_task_id() -> str:
    """A task id: UTC time plus a short random suffix, e.g. ``T20261122-0412-3fa9``."""
    return f"T{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def router_lock(config: Config) -> RouterLock:
    """The lock that keeps one router per session."""
    return RouterLock(config.tmux.socket, config.tmux.session)


def templates_for(config: Config) -> Templates:
    """The effective prompt templates of a configuration."""
    return Templates.from_files(config.templates, contract=config.routing.contract)


async def route(
    config: Config,
    store: RunStore,
    *,
    until: t.Callable[[], bool] | None = None,
    printer: Printer | None = None,
    session: Session | None = None,
    beside: Beside | None = None,
) -> None:
    """Run the router over the session's running agents until ``until()`` (or forever).

    In a fleet, the router first takes the fleet's router role (one router per fleet
    project): while another router holds it, this one waits as a standby (or until
    ``until()``); when it loses the role, it stops (:class:`RoutingError`). ``beside``
    runs with it over the same drivers (one owner per agent); when it fails, routing
    stops and its error is raised.

    Raises
    ------
    RoutingError
        Another router already routes this session, or this one lost the router role.
    SessionNotFound
        The session is not up.
    """
    lock = router_lock(config)
    if not lock.acquire():
        msg = f"another router (pid {lock.holder()}) is routing session {config.tmux.session!r}"
        raise RoutingError(msg)
    session = session or Session(config, store)
    follower = None
    holding = answers = None
    cursor = EventCursor(store)
    seat = _seat(config, store)
    try:
        if printer is not None:
            follower = asyncio.create_task(follow(store, printer, cursor=cursor))
        if seat is not None and not await seat.take(until):
            return
        agents = await session.attach()
        post, elsewhere = _remote(config, store, seat) or (None, ())
        routing = Routing(
            session.config, store, agents, templates=templates_for(config), remote=elsewhere
        )
        async with (
            _board(config, store, list(agents), elsewhere, routing.wake) as states,
            _breaker(config, store, list(agents), routing.wake) as gate,
        ):
            routing.gate = gate
            router = Router(routing, post=post, states=states)
            if seat is not None:
                for driver in routing.agents.values():
                    driver.on("before-paste", seat.before_paste)
                holding = asyncio.create_task(seat.hold(router.stop), name="router-role")
                answers = asyncio.create_task(_take_answers(config, store, seat))
            lanes = None
            if beside is not None:
                lanes = asyncio.create_task(beside(agents, session.host, gate))
            if lanes is not None:
                lanes.add_done_callback(lambda _done: router.stop())
            try:
                await router.run(until=until)
            finally:
                if lanes is not None:
                    lanes.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await lanes
    finally:
        for task in (holding, answers):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if seat is not None:
            await asyncio.to_thread(seat.release)
        if follower is not None and printer is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            for event in cursor.read():  # what was written after its last wake-up
                printer(event)
        lock.release()
        await session.host.close()
    if seat is not None and seat.fenced is not None:
        msg = f"the router stopped: {seat.fenced}"
        raise RoutingError(msg)


def _seat(config: Config, store: RunStore) -> RouterSeat | None:
    """The seat of this router in the fleet's router role (None without a fleet)."""
    if config.fleet is None:
        return None
    from politerm.engine.fleetlink import open_queue, router_seat

    return router_seat(config, store, open_queue(config, store))


async def _take_answers(config: Config, store: RunStore, seat: RouterSeat) -> None:
    """Apply the answers given on other nodes to this router's tasks, while it holds the role."""
    from politerm.engine.fleetanswers import TaskAnswers
    from politerm.engine.fleetlink import open_queue

    assert config.fleet is not None

    def apply(task_id: str, text: str, question: str | None, by: str) -> str:
        answer(store, config, task_id, text, question=question, by=by)
        return f"answered task {task_id}"

    queue = open_queue(config, store)
    try:
        await TaskAnswers(queue, config.fleet.node, apply, lambda: seat.token is not None).run()
    finally:
        queue.conn.close()


def _remote(
    config: Config, store: RunStore, seat: RouterSeat | None
) -> tuple[FleetPost, list[str]] | None:
    """The fleet's queue and the agents whose turns go through it (None without a fleet)."""
    elsewhere = here_config(config)[1]
    if not elsewhere:
        return None
    from politerm.engine.fleetlink import FleetPost, open_queue

    return FleetPost(open_queue(config, store), seat), elsewhere


def _board(
    config: Config,
    store: RunStore,
    local: list[str],
    remote: t.Collection[str],
    wake: t.Callable[[str], None],
) -> contextlib.AbstractAsyncContextManager[BoardFeed | None]:
    """The fleet's board for this router (nothing without ``[fleet]``)."""
    if config.fleet is None:
        return contextlib.nullcontext(None)
    from politerm.engine.fleetboard import router_board

    return router_board(config, store, local, remote, wake)


def _breaker(
    config: Config, store: RunStore, agents: list[str], wake: t.Callable[[str], None]
) -> contextlib.AbstractAsyncContextManager[RouterBreaker | None]:
    """The fleet's budget breaker in front of this router's own agents' turns."""
    if config.fleet is None:
        return contextlib.nullcontext(None)
    from politerm.engine.fleetbudget import router_breaker

    return router_breaker(config, store, agents, wake)


FOLLOW_BACKSTOP = 30.0
"""Longest a follower sleeps without a store notification (a missed one costs this much)."""


async def follow(
    store: RunStore,
    printer: Printer,
    *,
    task_id: str | None = None,
    after: int | None = None,
    watch: StoreWatch | None = None,
    cursor: EventCursor | None = None,
) -> None:
    """Print the store's events as they are written (runs until cancelled).

    Sleeps until a commit to the store (any process) and then reads only the new events;
    on cancellation the events written until then are printed first. A caller that may
    cancel before the task ever ran passes its own ``cursor`` and flushes it afterwards.
    """
    cursor = cursor or EventCursor(store, task_id=task_id, after=after)
    async with contextlib.AsyncExitStack() as stack:
        if watch is None:
            watch = await stack.enter_async_context(StoreWatch(store.path))
        try:
            while True:
                changed = watch.event()
                for event in cursor.read():
                    printer(event)
                await watch.wait(FOLLOW_BACKSTOP, event=changed)
        finally:
            for event in cursor.read():
                printer(event)


def submit(store: RunStore, config: Config, request: str, *, task_id: str | None = None) -> Task:
    """Record a new task; the router picks it up."""
    if not request.strip():
        msg = "the task request is empty"
        raise RoutingError(msg)
    tid = check_id(task_id) if task_id is not None else new_task_id()
    task = store.create_task(tid, request, max_rounds=config.routing.max_rounds)
    store.add_event("task", task_id=tid, detail=request)
    return task


LOCK_LOOK = 1.0
"""How often a follower looks whether the router it relied on has stopped."""


async def follow_task(
    config: Config,
    store: RunStore,
    task_id: str,
    *,
    printer: Printer | None = None,
    timeout: float | None = None,
    after: int | None = None,
    route_here: Serve | None = None,
) -> Task:
    """Print a task's events until it ends (or waits for the user); return it.

    Another process routes it (the project's service, or another ``poli task``); with
    ``route_here`` this process routes whenever no router runs, so a task is never left
    unrouted because the router it relied on stopped for its own task.

    Raises
    ------
    RoutingError
        No such task, or it did not settle within ``timeout`` (it goes on).
    """
    if store.get_task(task_id) is None:
        msg = f"no task {task_id!r}"
        raise RoutingError(msg)

    def settled() -> bool:
        current = store.get_task(task_id)
        return current is None or current.state not in ACTIVE

    here = None if route_here is None else (router_lock(config), route_here)
    cursor = EventCursor(store, task_id=task_id, after=after)
    try:
        async with asyncio.timeout(timeout):
            await _follow_until(store, settled, printer, cursor, here)
    except TimeoutError:
        msg = f"task {task_id} not finished within {timeout:g}s (it goes on; see `poli status`)"
        raise RoutingError(msg) from None
    final = store.get_task(task_id)
    assert final is not None
    return final


async def follow_until_idle(store: RunStore, printer: Printer | None = None) -> None:
    """Print the project's events until no task is in flight (another process routes)."""

    def idle() -> bool:
        return not any(tk.state in ACTIVE for tk in store.list_tasks(active_only=True))

    await _follow_until(store, idle, printer, EventCursor(store))


async def _follow_until(
    store: RunStore,
    settled: t.Callable[[], bool],
    printer: Printer | None,
    cursor: EventCursor,
    here: tuple[RouterLock, Serve] | None = None,
) -> None:
    """Print ``cursor``'s events until ``settled()``; ``here``: route whenever no router runs."""
    show = printer or (lambda _e: None)
    follower = asyncio.create_task(follow(store, show, cursor=cursor))
    try:
        async with StoreWatch(store.path) as watch:
            while not settled():
                if here is not None and here[0].acquire():
                    here[0].release()
                    with contextlib.suppress(RoutingError):  # another one took it first
                        await here[1](settled)
                    continue
                changed = watch.event()
                if settled():
                    break
                await watch.wait(LOCK_LOOK if here else FOLLOW_BACKSTOP, event=changed)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        for event in cursor.read():
            show(event)


def answer(
    store: RunStore,
    config: Config,
    task_id: str,
    text: str,
    *,
    question: str | None = None,
    by: str | None = None,
) -> None:
    """Answer the question a task is waiting on; the asking agent gets it next.

    ``question``: the question a view showed; the answer is refused unless the task still
    asks exactly that (None: whatever it asks). ``by``: who answered from where (``web``,
    ``dash``, another node's ``poli answer``), recorded in the event log.

    Raises
    ------
    RoutingError
        No such task, or it waits for no answer.
    StaleAction
        ``question`` was given and the task waits on no question, or on another one.
    """
    task = store.get_task(task_id)
    if question is not None and (task is None or task.state is not TaskState.WAITING_USER):
        msg = f"task {task_id} is not waiting for an answer any more"
        raise StaleAction(msg)
    if question is not None and task is not None and (task.question or "") != question:
        msg = f"task {task_id} now asks {task.question!r}, not the question shown"
        raise StaleAction(msg)
    if task is None:
        msg = f"no task {task_id!r}"
        raise RoutingError(msg)
    if task.state is not TaskState.WAITING_USER:
        msg = f"task {task_id} is {task.state.value}, not waiting for an answer"
        raise RoutingError(msg)
    asker = store.get_meta(f"asker:{task_id}") or PLANNER
    n = sum(1 for m in store.list_messages(task_id=task_id) if m.type == "answer")
    store.add_message(
        task_id=task_id,
        sender="USER",
        recipient=asker,
        type="answer",
        msg_id=task_id,
        body=text,
        header={},
        dedupe_key=f"answer:{task_id}:{n + 1}",
    )
    state = TaskState.PLANNING if asker == PLANNER else TaskState.EXECUTING
    store.update_task(task_id, state=state, clear=("question",))
    timeouts = config.timeouts
    total = timeouts.plan if asker == PLANNER else timeouts.exec
    store.set_expectation(task_id, sender=asker, type="plan", deadline=time.time() + total)
    store.add_event("answer", task_id=task_id, agent=asker, detail=text)
    if by is not None:
        shown = "" if question is None else f" {question!r}"
        store.add_event(
            "ui-action",
            task_id=task_id,
            detail=f"{by}: answered{shown}",
            data={"action": "answer", "by": by},
        )
    service.ensure(config)  # the answer is delivered now, not when someone routes next


async def abort(config: Config, store: RunStore, task_id: str | None = None) -> Task:
    """Abort a task: interrupt the agents working on it and drop its queued messages."""
    if task_id is None:
        active = [tk for tk in store.list_tasks() if tk.state in (*ACTIVE, TaskState.WAITING_USER)]
        if not active:
            msg = "no active task to abort"
            raise RoutingError(msg)
        task_id = active[-1].id
    task = store.get_task(task_id)
    if task is None:
        msg = f"no task {task_id!r}"
        raise RoutingError(msg)
    if task.state in TERMINAL:
        msg = f"task {task_id} is already {task.state.value}; there is nothing to abort"
        raise RoutingError(msg)
    with store.batch():
        store.update_task(task_id, state=TaskState.ABORTED, error="aborted by the user")
        store.clear_expectation(task_id)
        for msg_row in store.list_messages(task_id=task_id):
            if msg_row.state in (MessageState.QUEUED, MessageState.RETRIED):
                store.transition(msg_row.id, MessageState.DEAD, error="task aborted")
        # Its turns end with it, whether or not a router runs: no agent stays busy for it.
        turns = store.turns_of_task(task_id)
        for turn in turns:
            store.end_turn(turn.agent, turn.nonce, TurnEnd.TASK_ENDED)
    working = {turn.agent for turn in turns}
    session = Session(config, store)
    try:
        if working and await session.is_up():
            for name, driver in (await session.attach()).items():
                if name in working:
                    await driver.press(driver.profile.interrupt_key)
    finally:
        await session.host.close()
    store.add_event("aborted", task_id=task_id, detail="aborted by the user")
    final = store.get_task(task_id)
    assert final is not None
    return final
