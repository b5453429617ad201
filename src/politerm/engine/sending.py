"""Sending a message to an agent, and settling a delivery a stopped router left behind.

A message goes DELIVERING together with its turn (before anything is typed), then the
driver delivers it with confirmation. A DELIVERING message found after a restart is
settled before anything else is sent to that agent, from its open row in the journal of
turns by the driver layer's one recovery (:func:`politerm.driver.leftover.resume`), and
confirmed like a fresh delivery: busy or its answer on screen → delivered; its text in the
input box → submit and confirm; nothing there, or no row (never typed) → deliver it again
(same text, same nonce).
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.driver import Outcome
from politerm.driver.leftover import resume
from politerm.engine import decide
from politerm.engine.routebase import ACTIVE, FOLLOW_UPS, Begun
from politerm.protocol.primer import new_nonce
from politerm.store.journal import Serves, Workflow
from politerm.store.models import MessageState, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, DeliveryResult
    from politerm.engine.deadlines import Deadlines
    from politerm.engine.routebase import Endings, Routing
    from politerm.store.models import Message, Task, Turn
    from politerm.terminal import Snapshot


class Sending:
    """Delivering messages and settling in-flight ones (a part of the router).

    Parameters
    ----------
    routing
        The router's shared state.
    endings
        Marks an agent dead, fails a task whose message was dead-lettered.
    deadlines
        Starts a step's clock when its prompt is confirmed.
    """

    def __init__(self, routing: Routing, endings: Endings, deadlines: Deadlines) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.endings, self.deadlines = endings, deadlines

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
        """Mark ``msg`` DELIVERING (and open its turn); call inside a store batch.

        None when its task ended meanwhile (the message is dead-lettered instead). ``task``:
        its task as read in this same batch, if the caller has it.
        """
        live = self._live_task(msg, task)
        if live is False:
            return None
        task = live
        follow_up = msg.type in FOLLOW_UPS and turn is not None
        # A STRANDED attempt left the text (with its nonce) in the input box: submit that,
        # do not paste it again.
        stranded = bool(
            (msg.last_error or "").startswith(Outcome.STRANDED.value)
            and msg.text
            and msg.turn_nonce
            and driver.profile.input_text(snap)
        )
        if stranded and msg.turn_nonce:
            nonce = msg.turn_nonce
        else:
            nonce = turn.nonce if follow_up and turn is not None else new_nonce()
        begun = self._open(driver.name, msg, task, nonce, driver.turn_start(snap), follow_up)
        if not follow_up:
            driver.new_turn()
        return dataclasses.replace(begun, stranded=stranded)

    def begin_remote(self, name: str, msg: Message) -> Begun | None:
        """Mark ``msg`` DELIVERING for an agent on another node (inside a store batch).

        Its node types it under a lease of the fleet's work; None when its task ended.
        """
        task = self._live_task(msg, None)
        if task is False:
            return None
        return self._open(name, msg, task, new_nonce(), -1, follow_up=False)

    def _live_task(self, msg: Message, task: Task | None) -> Task | t.Literal[False] | None:
        """``msg``'s task (None: it has none); False when it ended (``msg`` goes DEAD)."""
        if task is None or task.id != msg.task_id:
            task = self.store.get_task(msg.task_id) if msg.task_id else None
        if task is not None and task.state not in ACTIVE:
            self.store.transition(msg.id, MessageState.DEAD, error=f"task {task.state.value}")
            return False
        return task

    def _open(
        self,
        name: str,
        msg: Message,
        task: Task | None,
        nonce: str,
        start_line: int,
        follow_up: bool,
    ) -> Begun:
        kept = msg.text if msg.turn_nonce == nonce else None
        text = kept or self.render(msg, nonce, task)
        msg = self.store.transition(
            msg.id,
            MessageState.DELIVERING,
            expect={MessageState.QUEUED, MessageState.RETRIED},
            turn_nonce=nonce,
            text=text,
        )
        if not follow_up:
            self.store.start_turn(
                name, nonce=nonce, task_id=msg.task_id, message_id=msg.id, start_line=start_line
            )
            self.routing.loops[name].turn_nonce = nonce
        return Begun(msg, nonce, text, follow_up=follow_up)

    async def send(self, driver: AgentDriver, begun: Begun | None) -> None:
        """Type a begun delivery and record its outcome (durably, on every path)."""
        try:
            if begun is not None:
                result = await driver.deliver(
                    begun.text,
                    already_pasted=begun.stranded,
                    serves=_serves(begun.msg),
                    nonce=begun.nonce,
                )
                self.settled(driver, begun.msg, begun.nonce, result, follow_up=begun.follow_up)
        finally:
            self.store.sync()

    def hand_off(self, target: str, msg: Message, snap: Snapshot, task: Task | None = None) -> bool:
        """Begin ``msg``'s delivery for ``target``'s loop to type (inside a block's batch)."""
        driver, loop = self.routing.agents[target], self.routing.loops[target]
        if (
            driver.dead
            or loop.handoff is not None
            or not loop.settled
            or target in self.routing.clear_later
        ):
            return False
        loop.handoff = self.begin(driver, msg, None, snap, task)
        return loop.handoff is not None

    async def send_handoff(self, driver: AgentDriver, begun: Begun) -> None:
        """Deliver what a block's commit began for this agent (see BlockEffects).

        Between that commit and now its task may have ended (an abort, a failure): then
        nothing is typed and the message goes DEAD.
        """
        msg = self.store.get_message(begun.msg.id)
        turn = self.store.current_turn(driver.name)
        task = self.store.get_task(begun.msg.task_id) if begun.msg.task_id else None
        if msg is None or msg.state is not MessageState.DELIVERING:
            return
        if (
            turn is None
            or turn.nonce != begun.nonce
            or (task is not None and task.state not in ACTIVE)
        ):
            with self.store.batch():
                self.store.transition(
                    msg.id,
                    MessageState.DEAD,
                    expect=MessageState.DELIVERING,
                    error="its task ended before the prompt was typed",
                )
                if turn is not None and turn.nonce == begun.nonce:
                    self.store.end_turn(driver.name, turn.nonce, TurnEnd.TASK_ENDED)
            return
        await self.send(driver, begun)

    def settled(
        self,
        driver: AgentDriver,
        msg: Message,
        nonce: str,
        result: DeliveryResult,
        *,
        follow_up: bool,
        recovered: bool = False,
    ) -> None:
        """Record how a delivery ended: delivered, retried later, or dead-lettered."""
        self.outcome(
            driver.name, msg, nonce, result, follow_up=follow_up, recovered=recovered, driver=driver
        )

    def outcome(
        self,
        name: str,
        msg: Message,
        nonce: str,
        result: DeliveryResult,
        *,
        follow_up: bool,
        recovered: bool = False,
        driver: AgentDriver | None = None,
    ) -> None:
        """Record how ``name``'s delivery ended (its driver, when it runs here, is told)."""
        evidence = " | ".join(result.evidence)
        actions = decide.delivery_ended(
            decide.Delivery(
                result.outcome,
                result.submitted,
                result.rule,
                evidence,
                name,
                msg.type,
                msg.attempts,
                self.config.routing.max_attempts,
                follow_up,
                msg.task_id,  # a task gone meanwhile is not failed (see _fail)
            )
        )
        with self.store.batch():
            for action in actions:
                match action:
                    case decide.Confirmed(restart_clock=restart):
                        self.store.transition(
                            msg.id,
                            MessageState.DELIVERED,
                            expect=MessageState.DELIVERING,
                            evidence=evidence,
                        )
                        self.store.set_turn_state(name, nonce, TurnState.WAITING)
                        if restart and msg.task_id is not None:
                            self.deadlines.restart_clock(msg.task_id, name, time.time())
                        if driver is not None:
                            driver.turn_delivered(msg.task_id)
                        self.routing.event(
                            "recovered" if recovered else "delivered",
                            msg,
                            detail=f"{msg.sender} → {msg.recipient}: {msg.type} "
                            f"({result.submits} submit, {result.elapsed * 1000:.0f} ms, "
                            f"confirmed by {result.source})",
                        )
                    case decide.AgentGone():
                        self.store.transition(
                            msg.id,
                            MessageState.RETRIED,
                            expect=MessageState.DELIVERING,
                            error="agent exited",
                        )
                    case decide.EndTurn(reason=reason):
                        self.store.end_turn(name, nonce, reason)
                        self.routing.loops[name].turn_nonce = None
                    case decide.RetryLater(after=after, error=error):
                        self.routing.loops[name].retry_at = time.monotonic() + after
                        self.store.transition(
                            msg.id,
                            MessageState.RETRIED,
                            expect=MessageState.DELIVERING,
                            error=error,
                            evidence=evidence,
                        )
                        self.routing.event(
                            "retry", msg, detail=f"{result.outcome.value}: {evidence}"
                        )
                    case decide.DeadLetter(error=error, clear_input=clear):
                        self.store.transition(
                            msg.id,
                            MessageState.DEAD,
                            expect=MessageState.DELIVERING,
                            error=error,
                            evidence=evidence,
                        )
                        self.routing.event(
                            "dead-letter", msg, detail=f"{result.outcome.value}: {evidence}"
                        )
                        if clear:
                            self.routing.clear_later.add(
                                name
                            )  # its text must not join the next prompt
        # Endings wake other loops and write their own batches: after the outcome's commit.
        for action in actions:
            if isinstance(action, decide.AgentGone):
                self.endings.agent_died(name, result.evidence)
            elif isinstance(action, decide.FailTask):
                self.endings.carry_fail(action)

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

    async def settle_in_flight(self, driver: AgentDriver, snap: Snapshot) -> None:
        """Settle every DELIVERING message of this agent before anything else is sent to it."""
        for msg in self.store.in_flight(driver.name):
            nonce = msg.turn_nonce or new_nonce()
            turn = self.store.current_turn(driver.name)
            follow_up = msg.type in FOLLOW_UPS and (turn is None or turn.message_id != msg.id)
            if not follow_up and (turn is None or turn.nonce != nonce):
                # The turn row and the message go together; one without the other is an old
                # store: open the turn again so the answer is read from where it starts.
                if turn is not None:
                    self.store.end_turn(driver.name, turn.nonce, TurnEnd.HANDED_BACK)
                turn = self.store.start_turn(
                    driver.name,
                    nonce=nonce,
                    task_id=msg.task_id,
                    message_id=msg.id,
                    start_line=-1 if snap.alternate_screen else 0,
                )
            result = await self._confirm_left_over(driver, msg, turn, snap)
            self.store.add_event(
                "recovered",
                task_id=msg.task_id,
                agent=driver.name,
                detail=f"{msg.type} message found mid-delivery after a restart: {result.rule}",
            )
            if not follow_up:
                self.routing.loops[driver.name].turn_nonce = nonce
            self.settled(driver, msg, nonce, result, follow_up=follow_up, recovered=True)
            snap = (await driver.snapshot()) or snap

    async def _confirm_left_over(
        self, driver: AgentDriver, msg: Message, turn: Turn | None, snap: Snapshot
    ) -> DeliveryResult:
        from politerm.driver import DeliveryResult

        text = msg.text or self.render(msg, msg.turn_nonce or new_nonce())
        start = None if turn is None else turn.start_line
        mine = [r for r in self.store.journal_open(agent=driver.name) if r.serves == _serves(msg)]
        # The driver writes a prompt's row before it types: without one it never went in.
        found = await resume(driver, mine[-1], text, snap) if mine else None
        if found is not None and found.resumed == "delivered":
            return DeliveryResult(
                Outcome.DELIVERED,
                found.evidence,
                0,
                True,
                0.0,
                found.rule,
                sources=found.sources,
                turn_id=mine[-1].id,
            )
        # Our paste in the box is submitted and confirmed, never pasted twice; anything else
        # (nothing, or someone else's words, which delivery clears first): send it.
        return await driver.deliver(
            text,
            already_pasted=found is not None and found.resumed == "pasted",
            serves=_serves(msg),
            nonce=msg.turn_nonce,
            start_line=start,
        )


def _serves(msg: Message) -> Serves:
    """A loop message's record in the journal of turns."""
    return Serves(Workflow.LOOP, "messages", (msg.id,))
