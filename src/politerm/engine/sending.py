"""Sending a message to an agent, and settling a delivery a stopped router left behind.

A message goes DELIVERING together with its turn and its row in the journal of turns
(before anything is typed), then the driver delivers it with confirmation and records the
outcome in one commit with the message's. So a prompt in flight is an open journal row,
and that is all a new router reads: each HANDED row of an agent's loop messages is settled
before anything else is sent to that agent, by the driver layer's one recovery
(:func:`politerm.driver.leftover.resume`), and confirmed like a fresh delivery: busy or its
answer on screen → delivered; its text in the input box → submit and confirm; nothing there
→ deliver it again (same text, same nonce); its task ended meanwhile → not typed again.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.driver import Outcome
from politerm.driver.leftover import resume
from politerm.engine import agentstep, decide
from politerm.engine.decide import FOLLOW_UPS
from politerm.engine.execute import At, loop_serves
from politerm.engine.routebase import Begun
from politerm.protocol.primer import new_nonce
from politerm.store.journal import Workflow
from politerm.store.models import MessageState

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, DeliveryResult
    from politerm.engine.execute import Executor
    from politerm.engine.routebase import Routing
    from politerm.store import RunStore
    from politerm.store.journal import JournalRow
    from politerm.store.models import Message, Task, Turn
    from politerm.terminal import Snapshot


class Sending:
    """Delivering messages and settling in-flight ones (a part of the router).

    It types; what a delivery's start and outcome do is decided
    (:func:`~politerm.engine.agentstep.begin_delivery`, :func:`~politerm.engine.decide.
    delivery_ended`) and carried out by the executor.

    Parameters
    ----------
    routing
        The router's shared state.
    executor
        Carries out what a delivery's start and outcome call for.
    """

    def __init__(self, routing: Routing, executor: Executor) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.executor = executor

    async def deliver(
        self, driver: AgentDriver, msg: Message, turn: Turn | None, snap: Snapshot
    ) -> None:
        """Begin ``msg``'s delivery (its turn opens) and type it."""
        # The intent is committed without waiting for the disk: the outcome's commit right
        # after the delivery is durable and takes it along (see RunStore.batch).
        with self.store.batch(durable=False):
            driver.record_row()
            begun = self.begin(driver, msg, turn, snap)
        await self.send(driver, begun)

    def begin(
        self,
        driver: AgentDriver,
        msg: Message,
        turn: Turn | None,
        snap: Snapshot,
        task: Task | None = None,
    ) -> Begun | None:
        """Mark ``msg`` DELIVERING, open its turn and its journal row; inside a store batch.

        None when its task ended meanwhile (the message is dead-lettered instead). ``task``:
        its task as read in this same batch, if the caller has it.
        """
        return self._begin(driver.name, msg, turn, snap, task)

    def begin_remote(self, name: str, msg: Message) -> Begun | None:
        """Mark ``msg`` DELIVERING for an agent on another node (inside a store batch).

        Its node types it under a lease of the fleet's work; None when its task ended.
        """
        return self._begin(name, msg, None, None, None)

    def _begin(
        self, name: str, msg: Message, turn: Turn | None, snap: Snapshot | None, task: Task | None
    ) -> Begun | None:
        if task is None or task.id != msg.task_id:
            task = self.store.get_task(msg.task_id) if msg.task_id else None
        driver = self.routing.agents.get(name) if snap is not None else None
        stranded = (msg.last_error or "").startswith(Outcome.STRANDED.value)
        box = stranded and driver is not None and snap is not None and bool(driver.box_text(snap))
        step = agentstep.begin_delivery(
            agentstep.Outgoing(
                kind=msg.type,
                task_state=task.state if task is not None else None,
                turn_nonce=turn.nonce if turn is not None else None,
                nonce=msg.turn_nonce,
                has_text=bool(msg.text),
                stranded_before=stranded,
                box_text=box,
                fresh=new_nonce(),
            )
        )
        text, start = "", -1
        if isinstance(step, agentstep.Begin):
            text = msg.text if step.keep_text and msg.text else self.render(msg, step.nonce, task)
        if driver is not None and snap is not None:
            start = driver.turn_start(snap)
        return self.executor.begin(step, At(name, msg=msg), text, start)

    async def send(self, driver: AgentDriver, begun: Begun | None) -> None:
        """Type a begun delivery and record its outcome (durably, on every path)."""
        try:
            if begun is not None:
                await self._type(driver, begun, pasted=begun.stranded)
        finally:
            self.store.sync()

    async def _type(
        self, driver: AgentDriver, begun: Begun, *, pasted: bool, recovered: bool = False
    ) -> None:
        """Deliver a begun message; its outcome and its journal row commit together."""
        carried: list[tuple[tuple[decide.DeliveryAction, ...], At]] = []

        def record(result: DeliveryResult) -> None:
            carried.append(self._decided(driver.name, begun, result, recovered=recovered))
            self.executor.record(*carried[-1])

        await driver.deliver(
            begun.text,
            already_pasted=pasted,
            serves=loop_serves(begun.msg),
            nonce=begun.nonce,
            then=record,
        )
        for actions, at in carried:
            self.executor.end(actions, at)

    def hand_off(self, target: str, msg: Message, snap: Snapshot, task: Task | None = None) -> bool:
        """Begin ``msg``'s delivery for ``target``'s loop to type (inside a block's batch).

        The caller made sure the recipient takes it (:func:`~politerm.engine.agentstep.
        takes_handoff`).
        """
        loop = self.routing.loops[target]
        loop.handoff = self.begin(self.routing.agents[target], msg, None, snap, task)
        return loop.handoff is not None

    async def send_handoff(self, driver: AgentDriver, begun: Begun) -> None:
        """Deliver what a block's commit began for this agent (see BlockEffects).

        Between that commit and now its task may have ended (an abort, a failure): then
        nothing is typed and the message goes DEAD.
        """
        msg = self.store.get_message(begun.msg.id)
        if msg is None or msg.state is not MessageState.DELIVERING:
            return
        turn = self.store.current_turn(driver.name)
        task = self.store.get_task(begun.msg.task_id) if begun.msg.task_id else None
        drop = agentstep.handoff_stands(
            turn.nonce if turn is not None else None,
            begun.nonce,
            task.state if task is not None else None,
        )
        if drop is not None:
            self.executor.not_typed(driver.name, msg, drop.error)
            return
        await self.send(driver, begun)

    def outcome(
        self,
        name: str,
        msg: Message,
        nonce: str,
        result: DeliveryResult,
        *,
        follow_up: bool,
        recovered: bool = False,
        told: bool = True,
    ) -> None:
        """Record how ``name``'s delivery ended: delivered, retried later, or dead-lettered.

        The agent may run on another node of the fleet (engine/remote.py): its node typed.
        ``told``: its driver here hears of it (False: the process it went to is gone).
        """
        begun = Begun(msg, nonce, msg.text or "", follow_up=follow_up)
        actions, at = self._decided(name, begun, result, recovered=recovered)
        self.executor.carry(actions, dataclasses.replace(at, told=told))

    def _decided(
        self, name: str, begun: Begun, result: DeliveryResult, *, recovered: bool
    ) -> tuple[tuple[decide.DeliveryAction, ...], At]:
        """What a delivery's outcome calls for, and what it applies to."""
        msg = begun.msg
        actions = decide.delivery_ended(
            decide.Delivery(
                result.outcome,
                result.submitted,
                result.rule,
                " | ".join(result.evidence),
                name,
                msg.type,
                msg.attempts,
                self.config.routing.max_attempts,
                begun.follow_up,
                msg.task_id,  # a task gone meanwhile is not failed (see _fail)
            )
        )
        detail = (
            f"{msg.sender} → {msg.recipient}: {msg.type} ({result.submits} submit, "
            f"{result.elapsed * 1000:.0f} ms, confirmed by {result.source})"
        )
        at = At(
            name,
            msg=msg,
            nonce=begun.nonce,
            evidence=tuple(result.evidence),
            outcome=result.outcome.value,
            detail=detail,
            recovered=recovered,
            turn_id=result.turn_id,
        )
        return actions, at

    def render(self, msg: Message, nonce: str, task: Task | None = None) -> str:
        """The prompt of ``msg`` with ``nonce``, from the templates."""
        if task is None or task.id != msg.task_id:
            task = self.store.get_task(msg.task_id) if msg.task_id else None
        name = msg.type if msg.type in self.routing.templates.texts else "message"
        return self.routing.templates.render(
            name,
            msg_id=msg.msg_id,
            nonce=nonce,
            body=msg.body,
            request=task.request if task else "",
            sender=msg.sender,
            recipient=msg.recipient,
            msg_type=msg.type,
            file_ref=f"msgs/{msg.msg_id}-{nonce}.md",
        )

    # --- settling what a stopped router left --------------------------------------------

    async def settle_in_flight(self, driver: AgentDriver, snap: Snapshot) -> bool:
        """Settle each prompt handed to this agent and not settled (a crash cut it short).

        Those are the HANDED rows of its loop messages in the journal of turns; True if
        there was one.
        """
        rows = handed(self.store, driver.name)
        for row, msg in rows:
            turn = self.store.current_turn(driver.name)
            follow_up = msg.type in FOLLOW_UPS and (turn is None or turn.message_id != msg.id)
            begun = Begun(msg, row.nonce or "", msg.text or "", follow_up=follow_up)
            task = self.store.get_task(msg.task_id) if msg.task_id else None
            found = await resume(driver, row, begun.text, snap)
            self.store.add_event(
                "recovered",
                task_id=msg.task_id,
                agent=driver.name,
                detail=f"{msg.type} message found mid-delivery after a restart: {found.rule}",
            )
            task_state = task.state if task is not None else None
            match agentstep.left_over_fate(found.resumed, task_state):
                case agentstep.Taken():
                    result = found.confirmed(row.id)
                    self.outcome(
                        driver.name, msg, begun.nonce, result, follow_up=follow_up, recovered=True
                    )
                case agentstep.Abandon(error=why, clear_box=clear):
                    self.executor.not_typed(driver.name, msg, why, clear_box=clear)
                case agentstep.Retype(pasted=pasted):
                    if not follow_up:
                        self.routing.loops[driver.name].turn_nonce = begun.nonce
                    # Our paste in the box is submitted and confirmed, never pasted twice;
                    # anything else (nothing, or someone else's words, cleared first): send it.
                    await self._type(driver, begun, pasted=pasted, recovered=True)
            snap = (await driver.snapshot()) or snap
        return bool(rows)


def handed(store: RunStore, agent: str) -> list[tuple[JournalRow, Message]]:
    """``agent``'s loop messages handed and not settled: HANDED rows, DELIVERING messages.

    The two commit together (see :class:`Sending`), so an open row is the whole story.
    """
    found = []
    for row in store.journal_open(agent=agent, workflow=Workflow.LOOP):
        msg = store.get_message(int(row.serves.key[0]))
        if msg is not None and msg.state is MessageState.DELIVERING:
            found.append((row, msg))
    return found
