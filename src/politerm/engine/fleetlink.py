"""The engine's side of the fleet's queue (:mod:`politerm.fleet`): a router's post of turns.

Imported only when ``[fleet]`` is configured, so a project without one never needs redis-py.
The queue's payloads and outcomes are redacted with the store's patterns before they leave
the process (``WorkQueue(redact=…)``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import typing as t

from politerm.engine.fleetmeta import ROUTER_META
from politerm.engine.turnwork import ANSWER_KIND, PAUSED, TURN_KIND, TurnReply
from politerm.errors import Fenced, FleetError, LeaseLost, StaleAction, WorkInvalid
from politerm.fleet.connect import connect_config
from politerm.fleet.queue import WorkQueue
from politerm.fleet.routers import RouterLease, RouterRole
from politerm.fleet.work import Work, WorkKind, WorkState

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.engine.turnwork import TurnWork
    from politerm.store import RunStore

log = logging.getLogger(__name__)

#: Longest one read of the results stream blocks its thread (the reader looks again after).
REPLY_WAIT = 2.0
#: Longest a standby router waits between its looks at the router role.
STANDBY_LOOK = 1.0
#: Longest ``poli approve`` waits for the node of a remote agent to take its answer.
ANSWER_WAIT = 30.0


def open_queue(config: Config, store: RunStore | None = None) -> WorkQueue:
    """The project's work queue in the fleet's Redis (no command is sent yet).

    Raises
    ------
    FleetRefused
        ``[fleet] url`` is not one politerm connects to (unauthenticated and not loopback…).
    """
    assert config.fleet is not None
    conn = connect_config(config.fleet)
    redact = None if store is None else store.redact
    return WorkQueue.from_config(conn, config.fleet, config.project.root, redact=redact)


class Results:
    """One reader of the fleet's results stream for a whole router, waking waiters by id.

    Each remote agent's loop waits here for its work's result: an asyncio event, no
    thread. One task reads the stream (one blocking XREAD in a worker thread at a time,
    at most :data:`REPLY_WAIT` long) while anyone waits, and wakes the waiters of each id
    it reads; with no waiter left it stops after its current read. Its cursor is taken
    before the first record is looked at (:meth:`start`) and kept for the router's life,
    so a result that lands between a look and the next wait still wakes that wait.
    """

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self.cursor: str | None = None
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Take the stream's end as the cursor, once (before any record is looked at)."""
        if self.cursor is None:
            self.cursor = self.queue.results_end()

    async def wait(self, work_id: str, timeout: float) -> bool:
        """Sleep until a result for ``work_id`` is read, or ``timeout``; True if one was."""
        woken = asyncio.Event()
        self._waiters.setdefault(work_id, set()).add(woken)
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="fleet-results")
        try:
            async with asyncio.timeout(timeout):
                await woken.wait()
        except TimeoutError:
            return False
        finally:
            waiting = self._waiters.get(work_id)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self._waiters[work_id]
        return True

    @property
    def waiting(self) -> int:
        """How many waits are under way."""
        return sum(len(w) for w in self._waiters.values())

    async def _read(self) -> None:
        while self._waiters:
            try:
                if self.cursor is None:
                    self.cursor = await asyncio.to_thread(self.queue.results_end)
                cursor, found = await asyncio.to_thread(
                    self.queue.read_results, self.cursor, REPLY_WAIT
                )
            except FleetError as exc:
                # The waiters run out at their own bound and their loops look again.
                log.warning("reading the fleet's results: %s", exc)
                await asyncio.sleep(REPLY_WAIT)
                continue
            self.cursor = cursor
            for fields in found:
                for woken in self._waiters.get(fields.get("id", ""), ()):
                    woken.set()


class FleetPost:
    """Where a router posts turns for other nodes and reads their replies: the fleet's queue.

    ``seat``: the router's hold on the fleet's router role; its posts carry the role's
    token, and the queue refuses them once another router took the role.
    """

    def __init__(self, queue: WorkQueue, seat: RouterSeat | None = None) -> None:
        self.queue = queue
        self.seat = seat
        self.results = Results(queue)

    def post(self, work: TurnWork) -> None:
        """Submit the turn (an id already known changes nothing).

        Raises
        ------
        Fenced
            This router lost the router role: nothing was posted (and the router stops).
        """
        token = None if self.seat is None else self.seat.token
        try:
            self.queue.submit(
                Work(work.work_id, work.agent, WorkKind(TURN_KIND), work.payload()), router=token
            )
        except Fenced as exc:
            if self.seat is not None:
                self.seat.lost(str(exc))
            raise

    def reply(self, work: TurnWork) -> TurnReply | None:
        """The node's reply, a dead letter as a turn not delivered, a pause, or None (not yet).

        Work a budget cap paused is a reply of outcome :data:`PAUSED` (its error: the
        breaker's reason); it goes on by itself when the cap allows.
        """
        self.results.start()
        try:
            record, result = self.queue.standing(work.work_id)
        except WorkInvalid:
            return None  # not known (expired after [fleet] keep): the caller posts it again
        if result is None:
            if record.state is WorkState.PAUSED:
                return TurnReply(False, PAUSED, error=record.paused, node=record.node)
            return None
        if result.state is WorkState.DEAD:
            why = str(result.outcome.get("error") or "no node could run it")
            return TurnReply(False, "blocked", error=f"dead-lettered by the fleet: {why}")
        return TurnReply.from_payload(result.outcome)

    async def wait(self, work: TurnWork, timeout: float) -> None:
        """Sleep until ``work`` may have a reply (at most ``timeout``)."""
        await self.results.wait(work.work_id, timeout)


class RouterSeat:
    """A router's hold on the fleet's router role (:mod:`politerm.fleet.routers`).

    :meth:`take` waits as a standby until the role is this router's; :meth:`hold` renews
    it while the router runs and, when it is lost (another router took it, or it could not
    be renewed within its lease), records why and stops the router: a fenced router types
    and posts nothing more. Its state is kept in the store's meta (``fleet-router``) for
    ``poli status``.
    """

    def __init__(self, role: RouterRole, store: RunStore) -> None:
        self.role, self.store = role, store
        self.lease: RouterLease | None = None
        self.fenced: str | None = None
        self._on_lost: t.Callable[[], None] = lambda: None
        self._shown = ""

    @property
    def token(self) -> int | None:
        """The role's token while this router holds it."""
        return None if self.lease is None or self.fenced else self.lease.token

    def _show(self, state: dict[str, t.Any], kind: str, detail: str) -> None:
        text = json.dumps(state, sort_keys=True)
        if text == self._shown:
            return
        self._shown = text
        with self.store.batch():
            self.store.set_meta(ROUTER_META, text)
            self.store.add_event(kind, detail=detail)

    async def take(self, until: t.Callable[[], bool] | None = None) -> bool:
        """Wait as a standby until the role is taken; False if ``until()`` turned true first."""
        while True:
            try:
                got = await asyncio.to_thread(self.role.take)
            except FleetError as exc:
                log.warning("router %s: taking the router role: %s", self.role.holder, exc)
                wait = STANDBY_LOOK
            else:
                if isinstance(got, RouterLease):
                    self.lease, self.fenced = got, None
                    state = {"role": "active", "holder": got.holder, "token": got.token}
                    why = f"router {got.holder} holds the fleet's router role (token {got.token})"
                    self._show(state, "router-active", why)
                    return True
                state = {"role": "standby", "holder": self.role.holder, "active": got.holder}
                why = (
                    f"router {self.role.holder} waits as a standby: router {got.holder} holds "
                    f"the fleet's router role (token {got.token}, {got.expires_in:.1f}s left)"
                )
                self._show(state, "router-standby", why)
                # Wake when its lease runs out (if it is not renewed, the role is free then).
                wait = min(STANDBY_LOOK, got.expires_in + 0.01)
            if until is not None and until():
                return False
            await asyncio.sleep(wait)

    async def before_paste(self) -> None:
        """Right before this router types into a local agent: the role must still be held.

        By this process's clock (no round trip): the lease, counted from when its last
        renewal was sent, has not run out. Else nothing is typed (:class:`LeaseLost`).
        """
        if self.fenced is None and (self.lease is None or self.lease.remaining() <= 0):
            self.lost("its router role ran out before it could be renewed")
        if self.fenced is not None:
            raise LeaseLost(self.fenced)

    def lost(self, why: str) -> None:
        """The role is lost: record it, and stop the router (once)."""
        if self.fenced is not None:
            return
        self.fenced = why
        state = {"role": "fenced", "holder": self.role.holder, "why": why}
        self._show(state, "router-fenced", f"this router stops: {why}")
        self._on_lost()

    async def hold(self, on_lost: t.Callable[[], None]) -> None:
        """Renew the role every third of its lease until cancelled or lost."""
        assert self.lease is not None
        self._on_lost = on_lost
        while self.fenced is None:
            await asyncio.sleep(self.role.lease / 3)
            try:
                self.lease = await asyncio.to_thread(self.role.renew, self.lease)
            except LeaseLost as exc:
                self.lost(str(exc))
            except FleetError as exc:
                if self.lease.remaining() > 0:
                    log.warning("router %s: renewing its role: %s", self.role.holder, exc)
                    continue
                self.lost(f"its router role ran out unrenewed ({exc})")

    def release(self) -> None:
        """Give the role up on a clean stop (a standby takes it at its next look)."""
        if self.lease is None or self.fenced is not None:
            return
        try:
            self.role.release(self.lease)
        except FleetError as exc:
            log.warning("router %s: releasing its role: %s", self.role.holder, exc)
        self.lease = None
        self.store.set_meta(ROUTER_META, "")


def router_seat(config: Config, store: RunStore, queue: WorkQueue) -> RouterSeat:
    """The router seat of this machine in the fleet's router role (``[fleet]`` set)."""
    assert config.fleet is not None
    seat = f"{config.fleet.node}/{config.tmux.socket}/{config.tmux.session}"
    return RouterSeat(RouterRole(queue, seat, config.fleet.lease, os.getpid()), store)


def post_answer(
    queue: WorkQueue, work_id: str, stream: str, payload: dict[str, t.Any], who: str
) -> str:
    """Post an answer (work of kind answer) on ``stream``; what its taker said.

    The taker — the node of the asking agent, or the router holding the router role —
    applies it and says what it did (``answered``), or why not (``error``; ``stale``: the
    question named is not the open one). ``who`` names the asker in the messages.

    Raises
    ------
    StaleAction
        The taker said the question named is not the open one any more.
    FleetError
        Nobody took it within :data:`ANSWER_WAIT`, or the taker said why it could not.
    """
    queue.submit(Work(work_id, stream, WorkKind(ANSWER_KIND), payload))
    result = queue.wait_result(work_id, ANSWER_WAIT)
    said = result.outcome
    where = f"node {said.get('node') or result.node or '?'}"
    if said.get("stale"):
        msg = f"{who} ({where}): {said['error']}"
        raise StaleAction(msg)
    if result.state is WorkState.DEAD or "error" in said:
        msg = f"{who} ({where}): {said.get('error') or 'no node took the answer'}"
        raise FleetError(msg)
    return f"{said.get('answered', 'answered')} (on {where})"
