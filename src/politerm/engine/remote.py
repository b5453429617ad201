"""Turns of agents hosted on another node: posted as fleet work, answered by that node.

The router's one seam for the fleet. A local agent's turn is typed by its driver here; an
agent hosted elsewhere (``[agents.X] node = "b"``, or a pool of nodes) has no driver here:
its loop begins the message's delivery exactly as a local one does (the message DELIVERING
and its turn open, in one commit), then posts the turn as :class:`TurnWork` to the fleet's
queue. The node that claims it types it through ``run_turn`` under a lease and replies with
the outcome and the answering block; this part records the delivery's outcome through
:meth:`Sending.outcome` and applies the block through :meth:`BlockEffects.apply_block`, the
same calls a local turn ends in. So blocks, routing, approvals and the task's states stay
the loop's own; only who types changes.

A router that restarts finds the message still DELIVERING with its turn open, and posts the
same work again (the same id: the queue keeps one), then waits for its reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing as t

from politerm.agents.state import AgentState
from politerm.driver import DeliveryResult, Outcome
from politerm.engine import agentstep, decide
from politerm.engine.decide import ACTIVE, FOLLOW_UPS
from politerm.engine.execute import At
from politerm.engine.fleetmeta import BUDGET_PAUSED, show_budget_pause
from politerm.engine.turnwork import OVER_BUDGET, PAUSED, TurnReply, TurnWork
from politerm.errors import PolitermError
from politerm.store.models import MessageState, TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.engine.effects import BlockEffects
    from politerm.engine.execute import Executor
    from politerm.engine.fleetboard import BoardFeed
    from politerm.engine.fleetlink import FleetPost
    from politerm.engine.routebase import Routing
    from politerm.engine.sending import Sending
    from politerm.store.models import Message, Task, Turn

log = logging.getLogger(__name__)

#: Longest a remote agent's loop sleeps without a wake-up (a reply lost to a reconnect).
REMOTE_BACKSTOP = 5.0
#: After the queue could not be reached, how long before trying again.
UNREACHABLE_BACKOFF = 1.0


def work_id(msg: Message, nonce: str) -> str:
    """The work of one attempt at a loop message: its id and its turn's nonce.

    Examples
    --------
    >>> from politerm.store.models import Message, MessageState
    >>> work_id(t.cast("Message", type("M", (), {"id": 7})()), "ab12")
    'loop-7-ab12'
    """
    return f"loop-{msg.id}-{nonce}"


class RemoteTurns:
    """The loops of the agents hosted on other nodes (a part of the router).

    Parameters
    ----------
    routing
        The router's shared state (its ``remote`` names these agents).
    executor
        Ends turns, fails tasks.
    sending
        Begins a delivery and records its outcome.
    effects
        Applies the answering block.
    post
        The fleet's queue.
    states
        The agents' states as their nodes publish them: a question an agent asks on its
        node sets its task WAITING_APPROVAL here, as a local agent's does.
    """

    def __init__(
        self,
        routing: Routing,
        executor: Executor,
        sending: Sending,
        effects: BlockEffects,
        post: FleetPost,
        states: BoardFeed | None = None,
    ) -> None:
        self.routing, self.store = routing, routing.store
        self.executor, self.sending, self.effects, self.post = executor, sending, effects, post
        self.states = states
        self._waiting: dict[str, TurnWork] = {}

    async def run(self, name: str) -> None:
        """Route ``name``'s turns through the queue until the router stops."""
        loop = self.routing.loops[name]
        while not self.routing.stopping.is_set():
            loop.wake.clear()
            bound = REMOTE_BACKSTOP
            try:
                await self.step(name)
            except PolitermError as exc:  # the queue could not be reached: look again
                log.warning("agent %s (remote): %s", name, exc)
                bound = UNREACHABLE_BACKOFF
            if loop.retry_at is not None:  # nothing announces a retry's time: wake for it
                bound = min(bound, max(0.05, loop.retry_at - time.monotonic()))
            waiters: list[asyncio.Future[t.Any]] = [asyncio.ensure_future(loop.wake.wait())]
            # The reply's wait (the router's one reader of the results stream), not while the
            # queue is unreachable: the loop looks again after the backoff.
            if name in self._waiting and bound == REMOTE_BACKSTOP:
                waiters.append(asyncio.ensure_future(self.post.wait(self._waiting[name], bound)))
            try:
                await asyncio.wait(waiters, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
                    if w.done() and not w.cancelled() and w.exception() is not None:
                        log.warning("agent %s (remote): waiting: %s", name, w.exception())

    async def step(self, name: str) -> None:
        """One look: apply a reply that came, or post the next message waiting."""
        turn = self.store.current_turn(name)
        if turn is not None:
            self._go_on(name, turn)
            return
        self._waiting.pop(name, None)
        loop = self.routing.loops[name]
        retry_in = None if loop.retry_at is None else loop.retry_at - time.monotonic()
        # As the local loop decides it; the agent counts as READY here: its node waits
        # for it to be idle before it types.
        if agentstep.next_send(AgentState.READY, retry_in, turn_open=False) is None:
            return  # a post that did not get through waits for its backoff
        loop.retry_at = None
        msg = self.store.next_queued(name)
        while msg is not None and msg.type in FOLLOW_UPS:
            # A remote turn is nudged by the driver of the node that runs it.
            self.store.transition(msg.id, MessageState.DEAD, error="its turn runs on another node")
            msg = self.store.next_queued(name)
        if msg is None:
            return
        with self.store.batch():
            begun = self.sending.begin_remote(name, msg)
        if begun is None:
            return
        work = self._work(name, begun.msg, begun.nonce)
        self.post.post(work)
        self._waiting[name] = work
        self.store.add_event(
            "posted",
            task_id=msg.task_id,
            agent=name,
            detail=f"{msg.sender} → {name}: {msg.type} posted to the fleet as {work.work_id}",
        )

    def _work(self, name: str, msg: Message, nonce: str) -> TurnWork:
        # The text as the store keeps it: redacted, so no secret goes onto a stream.
        kept = self.store.get_message(msg.id)
        text = (kept.text if kept is not None else None) or msg.text or ""
        return TurnWork(
            work_id(msg, nonce),
            name,
            text,
            nonce,
            msg.task_id,
            self.routing.step_timeout(name),
        )

    def _go_on(self, name: str, turn: Turn) -> None:
        """An open turn: its task may have ended; else look for its reply."""
        msg = self.store.get_message(turn.message_id) if turn.message_id else None
        task = self.store.get_task(turn.task_id) if turn.task_id else None
        if msg is None or (task is not None and task.state not in ACTIVE):
            # Its node may still run it; the reply, when it comes, finds no turn to answer.
            self.store.set_meta(f"{BUDGET_PAUSED}{turn.task_id or name}", "")
            self.executor.end_turn(name, turn, TurnEnd.TASK_ENDED)
            self._waiting.pop(name, None)
            return
        work = self._waiting.get(name)
        if work is None or work.nonce != turn.nonce:
            # After a restart of this router: post the same work again (one is kept).
            work = self._work(name, msg, turn.nonce)
            self.post.post(work)
            self._waiting[name] = work
        reply = self.post.reply(work)
        self._show_pause(name, turn, None if reply is None else reply.paused_by)
        if reply is not None and reply.outcome != PAUSED:
            self._waiting.pop(name, None)
            self.apply(name, turn, msg, reply)
        elif task is not None:
            self._question(name, task)

    def _question(self, name: str, task: Task) -> None:
        """The question ``name`` waits on at its node shows on its task, and goes when answered.

        The same decision as a local agent's (:func:`politerm.engine.decide.approval_change`),
        from the row its node published: a lost node, or no row, changes nothing.
        """
        row = self.states.of(name) if self.states is not None else None
        unknown = row is None or row.lost
        asking = None
        if row is not None and row.approval is not None:
            asking = (
                f"{name} (node {row.node}) asks to run {row.approval.get('what')}: answer "
                f"with `poli approve {name}` (or --deny) on any node"
            )
        waiting = row is not None and row.state == AgentState.WAITING_APPROVAL.value
        change = decide.approval_change(task.state, asking, waiting, unknown)
        if change is not None:
            self.executor.carry((change,), At(name, task=task))

    def _show_pause(self, name: str, turn: Turn, reason: str | None) -> None:
        """Keep the store's word on a budget pause of ``turn``'s task true (and say so once).

        The task stays in its step (its message DELIVERING, so its clock stands still):
        ``poli status`` shows why it waits; it goes on when the fleet's cap allows.
        """
        show_budget_pause(self.store, name, turn.task_id, reason)

    def apply(self, name: str, turn: Turn, msg: Message, reply: TurnReply) -> None:
        """Record the delivery's outcome, then apply the answering block (or end the turn)."""
        where = f" on node {reply.node}" if reply.node else ""
        task = self.store.get_task(turn.task_id) if turn.task_id else None
        if task is not None and task.state is TaskState.WAITING_APPROVAL:
            # The turn ended on its node: whatever it asked there was answered.
            self.executor.carry((decide.Approved(),), At(name, task=task))
        if reply.outcome == OVER_BUDGET and turn.task_id is not None:
            # The node's own [budget] stopped the turn (run_turn's OVER_BUDGET): the task
            # fails, as on one machine. (The fleet's caps pause work instead: PAUSED.)
            with self.store.batch():
                self.store.transition(msg.id, MessageState.DEAD, error=reply.error)
            self.executor.fail(
                turn.task_id, f"{name}{where}: {reply.error}", reason=TurnEnd.OVER_BUDGET
            )
            return
        if msg.state is MessageState.DELIVERING:
            result = _delivery(reply, where)
            self.sending.outcome(name, msg, turn.nonce, result, follow_up=False)
            if not reply.delivered:
                return
        for block in reply.blocks:
            current = self.store.current_turn(name)
            if current is None or current.nonce != turn.nonce:
                break
            with self.store.batch():
                self.effects.apply_block(name, current, block)
        current = self.store.current_turn(name)
        if current is None or current.nonce != turn.nonce:
            return
        # Delivered, and no block ended it: the turn failed on its node.
        why = reply.error or f"the turn ended {reply.outcome}"
        if turn.task_id is not None:
            self.executor.fail(turn.task_id, f"{name}{where}: {why}", reason=_turn_end(reply))
        else:
            self.executor.end_turn(name, current, _turn_end(reply))


def _delivery(reply: TurnReply, where: str) -> DeliveryResult:
    """The reply's delivery, as a local driver would have reported it."""
    if reply.delivered:
        outcome = Outcome.DELIVERED
    else:
        try:
            outcome = Outcome(reply.outcome)
        except ValueError:
            outcome = Outcome.BLOCKED  # not typed (dead-lettered by the queue, invalid)
    evidence = (f"{reply.error or reply.outcome}{where}",)
    return DeliveryResult(outcome, evidence, 1, reply.delivered, 0.0, f"fleet{where}", sources=())


def _turn_end(reply: TurnReply) -> TurnEnd:
    return TurnEnd.TIMED_OUT if reply.outcome == "timeout" else TurnEnd.TASK_ENDED
