"""The engine's side of the agents' board (:mod:`politerm.fleet.board`): publish and follow.

:class:`BoardPublisher` runs in each process that drives agents of a fleet — ``poli node``
for the agents it hosts, the router for the agents it drives itself. The drivers record
every state they read, every question and every turn in the run store; each commit wakes
the publisher (:class:`~politerm.store.watch.StoreWatch`), which reads its agents' rows once
and publishes only those that changed, in one script call. Nothing is polled per agent.

:class:`BoardFeed` follows the board for a router or a view: it blocks on the board's log
(one thread, one ``XREAD`` at a time) and takes the rows the entries carry, reads the
publishers' beats every heartbeat interval (one ``MGET``) so that a node that stopped
beating shows its agents as lost, and reads the whole board again now and then. Listeners
are told which agents changed.

Imported only when ``[fleet]`` is configured (it needs redis-py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import typing as t

from politerm._internal.aio import finish, listen, wait_any
from politerm.agents.approval import list_pending
from politerm.engine.turnwork import answer_stream
from politerm.errors import FleetError, StaleAction
from politerm.fleet.board import (
    ASKED,
    Board,
    BoardRow,
    TaskAsk,
    ask_field,
    asks_of,
    field,
    publisher,
    rows_of,
)
from politerm.store.watch import StoreWatch

if t.TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from politerm.config import Config
    from politerm.driver.observer import Observer
    from politerm.fleet.queue import WorkQueue
    from politerm.store import RunStore
    from politerm.store.models import Agent

log = logging.getLogger(__name__)

#: How often a publisher sends every row again, changed or not (a board that expired or
#: was lost with Redis's data fills again).
REPUBLISH_EVERY = 300.0
#: After Redis could not be reached, how long before trying again.
UNREACHABLE_BACKOFF = 1.0
#: A publisher beats when this share of its heartbeat interval passed since it last sent
#: anything (its beat expires after 3 intervals).
BEAT_SHARE = 0.9
#: Longest one wait of the feed on the board's log (it looks at its stop flag between).
FEED_BLOCK = 1.0
#: How often a feed reads the whole board again, changed or not (a safety net: the log
#: carries every change, and the beats are looked at every heartbeat interval).
FULL_EVERY = 60.0
#: A read of the log that came this much later than its wait allows means the feed fell
#: behind (a paused process, a starved machine): the log's cap may have dropped changes,
#: so it reads the whole board again.
STALL_SLACK = 1.0

Row = dict[str, t.Any]


def own_agents(store: RunStore, names: Collection[str], session: str) -> list[Agent]:
    """The store's rows of agents ``names`` of tmux session ``session``.

    The session tells a node's agents (``<session>-node``) from the router's on one
    machine, which share the store.
    """
    return [a for a in store.list_agents() if a.name in names and a.session == session]


def agent_rows(
    store: RunStore,
    names: Collection[str],
    session: str,
    states: Mapping[str, str] | None = None,
) -> dict[str, Row]:
    """The board rows of agents ``names`` of tmux session ``session``, as the store has them.

    ``states``: each agent's state as the observer sees it (EXITED once its pane is gone
    or dead), over the state its driver last stored.
    """
    agents = own_agents(store, names, session)
    seen = states or {}
    turns = {tn.agent: tn.task_id for tn in store.list_turns()}
    asked = {p.agent: p for p in list_pending(store, [a.name for a in agents]) if p.answer is None}
    out: dict[str, Row] = {}
    for a in agents:
        pending = asked.get(a.name)
        out[a.name] = {
            "state": seen.get(a.name, str(a.state)),
            "turn": turns.get(a.name),
            "profile": a.profile,
            "approval": None
            if pending is None
            else {"what": pending.what, "command": pending.command, "asked": pending.asked},
        }
    return out


def task_asks(store: RunStore) -> dict[str, Row]:
    """The questions the store's tasks wait on (task id → ``question``, ``agent``, ``asked``)."""
    from politerm.store.models import TaskState

    return {
        tk.id: {
            "question": tk.question,
            # The loop records who asked (the turn has ended by then).
            "agent": store.get_meta(f"asker:{tk.id}") or "",
            "asked": tk.updated,
        }
        for tk in store.list_tasks(active_only=True)
        if tk.state is TaskState.WAITING_USER and tk.question
    }


class BoardPublisher:
    """Publishes the rows of the agents one process drives, whenever the store changes.

    Parameters
    ----------
    store
        The run store the agents' drivers write to.
    board
        The fleet's board.
    node
        This machine's node name.
    agents
        The names of the agents this process drives.
    session
        Their tmux session.
    role
        ``node`` (``poli node``) or ``router``: the two publishers of one machine.
    every
        The heartbeat interval (``[fleet] heartbeat``): with no change for that long it
        publishes its beat alone, so its rows do not read as lost.
    observer
        The driver's observer of its agents' tmux server. An agent that exits while no
        turn runs has nobody looking at its screen, and its store row keeps its last
        state: the observer's word (tmux announces the death) makes the row EXITED at
        once, and wakes the publisher.
    tasks
        Whether it publishes the questions the store's tasks wait on (the router's
        publisher: the tasks are its), and removes each once answered or ended.
    """

    def __init__(
        self,
        store: RunStore,
        board: Board,
        node: str,
        agents: Collection[str],
        session: str,
        *,
        role: str = "node",
        every: float = 5.0,
        observer: Observer | None = None,
        tasks: bool = False,
    ) -> None:
        self.store, self.board, self.node = store, board, node
        self.observer, self.tasks = observer, tasks
        self._asked: dict[str, Row] = {}
        self._full = True  # the first publish names all its questions: older ones go
        self.agents, self.session = frozenset(agents), session
        self.role, self.every = role, every
        self._sent: dict[str, Row] = {}
        self._all_at = 0.0
        self._beat_at = -math.inf
        self.published = 0
        """How many script calls were made (each: one round trip, rows or the beat alone)."""

    async def changed(self) -> dict[str, Row]:
        """The rows that differ from what was published last."""
        states = None
        if self.observer is not None:
            mine = own_agents(self.store, self.agents, self.session)
            states = await self.observer.states(mine) if mine else {}
        rows = agent_rows(self.store, self.agents, self.session, states)
        return {name: row for name, row in rows.items() if self._sent.get(name) != row}

    def changed_asks(self) -> dict[str, Row | None]:
        """The tasks' questions that differ from what was published (None: no more)."""
        if not self.tasks:
            return {}
        now = task_asks(self.store)
        gone: dict[str, Row | None] = {task: None for task in self._asked if task not in now}
        return gone | {task: ask for task, ask in now.items() if self._asked.get(task) != ask}

    def publish(self, rows: dict[str, Row], asks: dict[str, Row | None] | None = None) -> None:
        """Publish ``rows`` and ``asks`` (blocking: call it in a thread).

        Remembered once Redis took them.
        """
        full = self.tasks and self._full
        self.board.publish(self.node, rows, role=self.role, every=self.every, asks=asks, full=full)
        self._sent.update(rows)
        for task, ask in (asks or {}).items():
            if ask is None:
                self._asked.pop(task, None)
            else:
                self._asked[task] = ask
        self._full = self._full and not full
        self.published += 1

    async def run(self, stop: asyncio.Event) -> None:
        """Publish on every commit to the store (and beat) until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        async with StoreWatch(self.store.path) as watch:
            while not stop.is_set():
                committed = watch.event()
                # An agent's death between turns writes nothing to the store: tmux says it.
                woken = [committed] if self.observer is None else [committed, self.observer.event()]
                if loop.time() - self._all_at >= REPUBLISH_EVERY:
                    # Every row again now and then: a board lost with Redis's data fills again.
                    self._all_at = loop.time()
                    self._sent.clear()
                    self._asked.clear()
                    self._full = True
                rows = await self.changed()
                asks = self.changed_asks()
                # A commit that changed none of its rows costs nothing, unless the beat is due.
                due = rows or asks or loop.time() - self._beat_at >= self.every * BEAT_SHARE
                try:
                    if due:
                        await asyncio.to_thread(self.publish, rows, asks)
                        self._beat_at = loop.time()
                    wait = self.every * BEAT_SHARE - (loop.time() - self._beat_at)
                except FleetError as exc:
                    log.warning("node %s: publishing its agents: %s", self.node, exc)
                    # Commits meanwhile wait too: one try per backoff while Redis is away.
                    await wait_any(stop, timeout=UNREACHABLE_BACKOFF)
                    continue
                await wait_any(*woken, stop, timeout=max(0.0, wait))


Listener = t.Callable[[set[str]], None]


class BoardFeed:
    """The board as one process follows it: the newest rows, and listeners told of changes.

    Parameters
    ----------
    board
        The fleet's board.
    every
        The nodes' heartbeat interval (``[fleet] heartbeat``): how often the whole board is
        read again, so a node that stopped beating shows its agents as lost.
    """

    def __init__(self, board: Board, every: float) -> None:
        self.board, self.every = board, every
        self.rows: dict[str, BoardRow] = {}
        """``NODE/AGENT`` → the row."""
        self.error: str | None = None
        """Why the board could not be read last time (None: it was)."""
        self.asks: dict[str, TaskAsk] = {}
        """``NODE/TASK`` → the question a task of that node's router waits on."""
        self._raw: dict[str, dict[str, t.Any]] = {}
        self._raw_asks: list[dict[str, t.Any]] = []
        self._alive: dict[str, bool] = {}
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._event = asyncio.Event()

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with the names of the agents whose rows changed; returns the undo."""
        return listen(self._listeners, listener)

    def event(self) -> asyncio.Event:
        """An event set by the next change (take it *before* reading the rows)."""
        return self._event

    def of(self, agent: str) -> BoardRow | None:
        """``agent``'s row: the one waiting on a question, else the newest (a pool has several)."""
        mine = [r for r in self.rows.values() if r.agent == agent]
        asking = [r for r in mine if r.approval is not None]
        return max(asking or mine, key=lambda r: r.at, default=None)

    def snapshot(self) -> list[dict[str, t.Any]]:
        """Every row as plain data, by node and agent."""
        return [r.to_json() for r in sorted(self.rows.values(), key=lambda r: (r.node, r.agent))]

    def asked(self) -> list[dict[str, t.Any]]:
        """The tasks' questions of routers that still beat, as plain data, by node and task."""
        shown = sorted(self.asks.values(), key=lambda a: (a.node, a.task))
        return [a.to_json() for a in shown if not a.lost]

    async def start(self) -> None:
        """Read the board once, then follow it (in the background)."""
        cursor = "0-0"
        try:
            cursor = await asyncio.to_thread(self.board.last_change)
            await self._read_all()
        except FleetError as exc:
            self.error = str(exc)
        self._task = asyncio.create_task(self._follow(cursor), name="poli-board-feed")

    async def close(self) -> None:
        """Stop following."""
        if self._task is not None:
            await finish(self._task)
            self._task = None

    async def __aenter__(self) -> t.Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _follow(self, cursor: str) -> None:
        """Follow the log until cancelled.

        Each change from the entry that woke it (one round trip), the beats every heartbeat
        interval (one ``MGET``), the whole board now and then, or when it fell behind.
        """
        loop = asyncio.get_running_loop()
        full_at = loop.time() + FULL_EVERY
        beats_at = loop.time() + self.every
        block = min(FEED_BLOCK, self.every)
        while True:
            try:
                asked = loop.time()
                cursor, changed, more = await asyncio.to_thread(self.board.follow, cursor, block)
                now = loop.time()
                behind = now - asked > block + STALL_SLACK
                if behind or self.error is not None or now >= full_at:
                    full_at, beats_at = now + FULL_EVERY, now + self.every
                    await self._read_all()
                else:
                    if changed:
                        await self._take(changed)
                    if now >= beats_at:
                        beats_at = now + self.every
                        alive = await asyncio.to_thread(self.board.alive, self._alive)
                        self._set(alive=alive)
                self.error = None
            except FleetError as exc:
                if self.error != str(exc):
                    log.warning("the agents' board: %s", exc)
                self.error = str(exc)
                await asyncio.sleep(UNREACHABLE_BACKOFF)
                continue
            if more:
                continue  # more entries wait: read on at once

    async def _read_all(self) -> None:
        """The whole board, the tasks' questions and every publisher's beat (3 round trips)."""
        records = await asyncio.to_thread(self.board.records)
        asks = await asyncio.to_thread(self.board.ask_records)
        by = {publisher(r) for r in [*records, *asks]}
        alive = await asyncio.to_thread(self.board.alive, by)
        self._set({field(r["node"], r["agent"]): r for r in records}, alive, whole=True, asks=asks)

    async def _take(self, changed: dict[str, dict[str, t.Any] | None]) -> None:
        """Rows the log carried (their publishers beat as they published), or read back.

        A task's question named there: all of them read again, with their routers' beats.
        """
        if any(k.startswith(ASKED) for k in changed):
            asks = await asyncio.to_thread(self.board.ask_records)
            by = {publisher(r) for r in asks}
            alive = await asyncio.to_thread(self.board.alive, by)
            self._set(alive=alive, asks=asks)
            changed = {k: r for k, r in changed.items() if not k.startswith(ASKED)}
        if not changed:
            return
        carried = {k: r for k, r in changed.items() if r is not None}
        named = sorted(k for k, r in changed.items() if r is None)
        if named:
            records = await asyncio.to_thread(self.board.records, named)
            carried |= {field(r["node"], r["agent"]): r for r in records}
        self._set(carried, {publisher(r): True for r in carried.values()})

    def _set(
        self,
        raw: t.Mapping[str, dict[str, t.Any]] | None = None,
        alive: t.Mapping[str, bool] | None = None,
        *,
        whole: bool = False,
        asks: list[dict[str, t.Any]] | None = None,
    ) -> None:
        """New rows, questions and beats in; the listeners told which changed.

        Agents by name; a task's question as :data:`~politerm.fleet.board.ASKED` and its
        field.
        """
        self._raw = dict(raw or {}) if whole else self._raw | dict(raw or {})
        self._alive = dict(alive or {}) if whole else self._alive | dict(alive or {})
        if asks is not None:
            self._raw_asks = asks
        rows = rows_of(self._raw.values(), self._alive)
        new = {field(r.node, r.agent): r for r in rows}
        changed = {r.agent for k, r in self.rows.items() if k not in new}
        changed |= {r.agent for k, r in new.items() if self.rows.get(k) != r}
        self.rows = new
        asked = {ask_field(a.node, a.task): a for a in asks_of(self._raw_asks, self._alive)}
        changed |= {ASKED + k for k in asked.keys() ^ self.asks.keys()}
        changed |= {ASKED + k for k, a in asked.items() if self.asks.get(k, a) != a}
        self.asks = asked
        self._tell(changed)

    def _tell(self, changed: set[str]) -> None:
        if not changed:
            return
        self._event.set()
        self._event = asyncio.Event()
        for listener in list(self._listeners):
            try:
                listener(changed)
            except Exception:
                log.exception("a board listener failed")


@contextlib.asynccontextmanager
async def router_board(
    config: Config,
    store: RunStore,
    local: Collection[str],
    remote: Collection[str],
    wake: Callable[[str], None],
) -> t.AsyncIterator[BoardFeed | None]:
    """A router's part of the board: publish its agents, follow the others'.

    It publishes the agents it drives (``local``) and, when some run on other nodes
    (``remote``), follows the board and wakes their loops when their rows change (a
    question asked there shows on the task here). Yields the feed (None without ``[fleet]``
    or without remote agents).
    """
    if config.fleet is None:
        yield None
        return
    queue, board = open_board(config, store)
    stop = asyncio.Event()
    publisher = BoardPublisher(
        store,
        board,
        config.fleet.node,
        local,
        config.tmux.session,
        role="router",
        every=config.fleet.heartbeat,
        tasks=True,
    )
    task = asyncio.create_task(publisher.run(stop), name="poli-board-publisher")
    feed = BoardFeed(board, config.fleet.heartbeat) if remote else None
    try:
        if feed is None:
            yield None
            return
        await feed.start()

        def woken(names: set[str]) -> None:
            for name in names & set(remote):
                wake(name)

        feed.listen(woken)
        try:
            yield feed
        finally:
            await feed.close()
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), UNREACHABLE_BACKOFF * 3)
        await finish(task)
        queue.conn.close()


def open_board(config: Config, store: RunStore | None = None) -> tuple[WorkQueue, Board]:
    """The project's queue and its board (no command sent yet)."""
    from politerm.engine.fleetlink import open_queue

    queue = open_queue(config, store)
    return queue, Board(queue)


def read_fleet(
    config: Config, store: RunStore | None = None, *, asks: bool = True
) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    """The board's rows and the live routers' tasks' questions, once (``poli status``, MCP).

    Raises
    ------
    FleetError
        Redis could not be reached.
    """
    queue, board = open_board(config, store)
    try:
        rows = [r.to_json() for r in board.rows()]
        asked = [a.to_json() for a in board.asks() if not a.lost] if asks else []
        return rows, asked
    finally:
        queue.conn.close()


def approve_remote(
    queue: WorkQueue,
    agent: str,
    *,
    deny: bool,
    by: str,
    asked: float | None = None,
    command: str | None = None,
) -> str:
    """Answer ``agent``'s question on its node; with ``asked``/``command``, only that question.

    Raises
    ------
    StaleAction
        The node's agent waits on no question, or on another one, or it was answered.
    FleetError
        The node did not take the answer in time.
    """
    from politerm.engine.fleetlink import post_answer

    # The node answers the question named (asked, command) only while it is the open one.
    payload: dict[str, t.Any] = {"decision": "deny" if deny else "approve", "by": by}
    if asked is not None:
        payload |= {"asked": asked, "command": command or ""}
    work_id = f"answer-{agent}-{secrets.token_hex(4)}"
    try:
        return post_answer(queue, work_id, answer_stream(agent), payload, agent)
    except FleetError as exc:
        if "no approval question" in str(exc):
            raise StaleAction(str(exc)) from None
        raise
