"""The router's side effects, in one place: :class:`Executor` carries out what was decided.

The router's decisions (:mod:`politerm.engine.decide`, :mod:`politerm.engine.agentstep`)
return actions as values; the parts that gather their facts (Deadlines, Sending,
BlockEffects, the router's loops) hand them here, with :class:`At` saying what they
apply to. The router's writes to the store happen in this module, with the loop state an
outcome leaves behind (a turn opened, a retry's time, a box to clear): a delivery begun
or settled, a step's clock, a block's effects, an approval shown on its task, a task done
in prose, a left-over prompt given up — and the endings.

Endings are where a routed task can wedge an agent, so they are here too: a turn ends
(with a :class:`~politerm.store.turns.TurnEnd` reason) on every path that finishes it —
answered, task failed or timed out or aborted, agent died, message dead-lettered — and the
follow-ups queued for it die with it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import typing as t

from politerm.agents.state import AgentState
from politerm.driver.leftover import abandon
from politerm.engine import agentstep, decide
from politerm.engine.decide import ACTIVE, FOLLOW_UPS, PLANNER
from politerm.engine.routebase import RESUME_META, RESUME_MSG, Begun
from politerm.store.journal import Serves, Workflow
from politerm.store.models import MessageState, TaskState, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from politerm.engine.routebase import Routing
    from politerm.protocol.block import Block
    from politerm.store.models import Expectation, Message, Task, Turn

log = logging.getLogger(__name__)

APPROVAL_RETURN = "approval-return:"

Action = (
    decide.DeliveryAction
    | decide.ClockAction
    | decide.BlockAction
    | decide.AwaitApproval
    | decide.Approved
    | agentstep.AgentDied
    | agentstep.EndStale
)


@dataclasses.dataclass(frozen=True)
class At:
    """What the actions of one event apply to (each action uses the fields it needs).

    Attributes
    ----------
    agent
        The agent whose event it is (a delivery's recipient, a block's author, a step's
        sender).
    turn, msg, nonce, task
        The turn, message (and the nonce it is typed under) and task concerned.
    block
        The block whose effects these are.
    exp
        The step (expectation) whose clock this is.
    evidence, outcome, detail
        A delivery's last screen lines, its outcome, and how it went (for its event); a
        block-less report's event.
    recovered, turn_id, told
        The delivery was settled after a restart; its row in the journal of turns; the
        agent's driver here hears of it (False: the process it went to is gone).
    rounds
        Plans forwarded for the block's task before it.
    """

    agent: str
    turn: Turn | None = None
    msg: Message | None = None
    nonce: str = ""
    task: Task | None = None
    block: Block | None = None
    exp: Expectation | None = None
    evidence: tuple[str, ...] = ()
    outcome: str = ""
    detail: str = ""
    recovered: bool = False
    turn_id: int | None = None
    told: bool = True
    rounds: int = 0


class Executor:
    """Carries out the router's decided actions (a part of the router).

    Parameters
    ----------
    routing
        The router's shared state.
    """

    def __init__(self, routing: Routing) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config

    def carry(self, actions: Sequence[Action], at: At, *, durable: bool = True) -> Message | None:
        """Carry out one event's ``actions``: :meth:`record` in one transaction, then :meth:`end`.

        Returns the message a forwarded block queued, if any.
        """
        with self.store.batch(durable=durable):
            forwarded = self.record(actions, at)
        self.end(actions, at)
        return forwarded

    def record(self, actions: Iterable[Action], at: At) -> Message | None:
        """Write what ``actions`` change, inside the caller's transaction (all but endings)."""
        forwarded: Message | None = None
        for action in actions:
            if not isinstance(action, decide.FailTask | agentstep.AgentDied):
                forwarded = self._one(action, at) or forwarded
        return forwarded

    def end(self, actions: Iterable[Action], at: At) -> None:
        """The failures and deaths among ``actions``, after the event's own commit.

        Each commits on its own and wakes the other loops.
        """
        for action in actions:
            match action:
                case decide.FailTask():
                    self._fail(action)
                case decide.AgentGone() | agentstep.AgentDied():
                    self.agent_died(at.agent, at.evidence)

    def _one(self, action: Action, at: At) -> Message | None:
        """Carry out one action (inside the event's transaction)."""
        name, msg, task = at.agent, at.msg, at.task
        match action:
            # --- a delivery ended
            case decide.Confirmed(restart_clock=restart) if msg is not None:
                self._move(msg, MessageState.DELIVERED, at)
                # None: it runs on another node, or the process it went to is gone.
                driver = self.routing.agents.get(name) if at.told else None
                if self.store.set_turn_state(name, at.nonce, TurnState.WAITING) is None:
                    # Its turn ended with its task while it was typed: over at once.
                    self.store.transition(msg.id, MessageState.ACKNOWLEDGED)
                    if driver is not None:
                        driver.end_turn(at.turn_id, TurnEnd.TASK_ENDED.value)
                elif restart and msg.task_id is not None:
                    self.restart_clock(msg.task_id, name, time.time())
                if driver is not None:
                    driver.turn_delivered(msg.task_id)
                kind = "recovered" if at.recovered else "delivered"
                self.routing.event(kind, msg, detail=at.detail)
            case decide.AgentGone() if msg is not None:
                # It waits for the agent's restart (``poli up --resume``).
                self._move(msg, MessageState.RETRIED, at, error="agent exited")
            case decide.EndTurn(reason=reason):
                self.store.end_turn(name, at.nonce, reason)
                self.routing.loops[name].turn_nonce = None
            case decide.RetryLater(after=after, error=error) if msg is not None:
                self.routing.loops[name].retry_at = time.monotonic() + after
                self._undelivered(msg, MessageState.RETRIED, error, at, "retry")
            case decide.DeadLetter(error=error, clear_input=clear) if msg is not None:
                self._undelivered(msg, MessageState.DEAD, error, at, "dead-letter")
                if clear:
                    self.routing.clear_later.add(name)  # its text must not join the next prompt
            # --- a step's clock
            case decide.ClearClock() if at.exp is not None:
                self.store.clear_expectation(at.exp.task_id)
            case decide.PauseClock(left=left) if at.exp is not None:
                self.store.set_meta(paused_key(at.exp), repr(left))
                why = f"{name} is limited: the {at.exp.type} step's clock stops"
                self._event("deadline-paused", at.exp.task_id, name, why)
            case decide.ResumeClock(deadline=deadline, left=left) if at.exp is not None:
                exp = at.exp
                self.store.set_meta(paused_key(exp), "")
                self.store.set_expectation(
                    exp.task_id, sender=name, type=exp.type, deadline=deadline, nudged=exp.nudged
                )
                why = f"{name}'s limit ended: {left:.0f}s left for the {exp.type} step"
                self._event("deadline-resumed", exp.task_id, name, why)
            case decide.Nudge() if task is not None:
                self.store.mark_nudged(task.id)
                self._follow_up(task, name, "nudge")
            case decide.RetryStep(deadline=deadline, retries=retries) if task and at.exp:
                self.store.set_meta(f"retries:{task.id}:{name}", str(retries))
                self.store.set_expectation(
                    task.id, sender=name, type=at.exp.type, deadline=deadline, nudged=True
                )
                self._follow_up(task, name, "retry")
            # --- a block of a turn
            case decide.Record() if at.block is not None:
                self._record(name, at.block, action, task)
            case decide.Rejected(task_id=task_id, detail=detail):
                self.store.add_event("rejected", task_id=task_id, agent=name, detail=detail)
            case decide.EndAnswered() if at.turn is not None:
                self.end_turn(name, at.turn)
            case decide.Ask(question=question) if task is not None and at.turn is not None:
                self.store.update_task(task.id, state=TaskState.WAITING_USER, question=question)
                self.store.clear_expectation(task.id)
                self.store.set_meta(f"asker:{task.id}", name)
                self._answered(name, at.turn)
            case decide.Done(report=report) if task is not None and at.turn is not None:
                self.store.update_task(task.id, state=TaskState.DONE, report=report)
                self.store.clear_expectation(task.id)
                self._event("done", task.id, name, at.detail or report)
                self._answered(name, at.turn)
            case decide.RoundLimit(why=why) if task is not None and at.turn is not None:
                self.store.update_task(task.id, state=TaskState.FAILED, error=why)
                self.store.clear_expectation(task.id)
                self._event("failed", task.id, name, "round limit reached")
                self._answered(name, at.turn)
                self.end_task_turns(task.id, TurnEnd.TASK_ENDED)
            case decide.Forward() if task and at.turn and at.block:
                return self._forward(name, at, action, task)
            # --- an approval asked or answered, a stale turn
            case decide.AwaitApproval(question=question) if task is not None:
                self.store.set_meta(f"{APPROVAL_RETURN}{task.id}", task.state.value)
                self.store.update_task(task.id, state=TaskState.WAITING_APPROVAL, question=question)
            case decide.Approved() if task is not None:
                back = self.store.get_meta(f"{APPROVAL_RETURN}{task.id}")
                state = TaskState(back or TaskState.PLANNING.value)
                self.store.update_task(task.id, state=state, clear=("question",))
            case agentstep.EndStale(reason=reason) if at.turn is not None:
                self.end_turn(name, at.turn, reason)
            case _:
                why = f"{type(action).__name__} without what it applies to: {at}"
                raise AssertionError(why)
        return None

    def _event(self, kind: str, task_id: str | None, agent: str, detail: str) -> None:
        self.store.add_event(kind, task_id=task_id, agent=agent, detail=detail)

    def _move(self, msg: Message, state: MessageState, at: At, error: str | None = None) -> None:
        """The one move a delivery's outcome makes of its message, from DELIVERING."""
        evidence = " | ".join(at.evidence)
        self.store.transition(
            msg.id, state, expect=MessageState.DELIVERING, error=error, evidence=evidence
        )

    def _undelivered(
        self, msg: Message, state: MessageState, error: str, at: At, event: str
    ) -> None:
        self._move(msg, state, at, error)
        self.routing.event(event, msg, detail=f"{at.outcome}: {' | '.join(at.evidence)}")

    # --- a delivery begun -----------------------------------------------------------------

    def begin(
        self, step: agentstep.Begin | agentstep.Drop, at: At, text: str, start_line: int
    ) -> Begun | None:
        """Carry out a decided delivery start (inside a store batch); None when dropped.

        ``start_line``: where the answer starts on the agent's screen (-1: unknown).
        """
        msg = at.msg
        assert msg is not None
        if isinstance(step, agentstep.Drop):
            self.store.transition(msg.id, MessageState.DEAD, error=step.error)
            return None
        msg = self.store.transition(
            msg.id,
            MessageState.DELIVERING,
            expect={MessageState.QUEUED, MessageState.RETRIED},
            turn_nonce=step.nonce,
            text=text,
        )
        if not step.follow_up:
            self.store.start_turn(
                at.agent,
                nonce=step.nonce,
                task_id=msg.task_id,
                message_id=msg.id,
                start_line=start_line,
            )
            self.routing.loops[at.agent].turn_nonce = step.nonce
        driver = self.routing.agents.get(at.agent)  # none: it runs on another node
        if driver is not None:
            if not step.follow_up:
                driver.new_turn()
            # The journal row commits with the message: an open row is a prompt in flight.
            driver.hand(text, loop_serves(msg), nonce=step.nonce, start_line=start_line)
        return Begun(msg, step.nonce, text, stranded=step.stranded, follow_up=step.follow_up)

    def not_typed(self, name: str, msg: Message, why: str, *, clear_box: bool = False) -> None:
        """``msg`` is not typed after all (its task ended): DEAD, its turn and row over.

        ``clear_box``: its text waits in the agent's input box (a stopped router pasted it).
        """
        with self.store.batch():
            self.store.transition(msg.id, MessageState.DEAD, error=why)
            turn = self.store.current_turn(name)
            if turn is not None and turn.nonce == msg.turn_nonce:
                self.store.end_turn(name, turn.nonce, TurnEnd.TASK_ENDED)  # and its row
            row = self.store.journal_row(msg.turn_id) if msg.turn_id else None
            if row is not None and row.open:
                abandon(self.store, row, why)
        if clear_box:
            self.routing.clear_later.add(name)

    # --- tasks and steps ------------------------------------------------------------------

    def start_task(self, task: Task) -> None:
        """A new task: its prompt goes to the planner, whose plan step starts."""
        with self.store.batch():
            self.store.add_message(
                task_id=task.id,
                sender="USER",
                recipient=PLANNER,
                type="task",
                msg_id=task.id,
                body=task.request,
                header={},
                dedupe_key=f"task:{task.id}",
                ttl=self.config.routing.message_ttl,
            )
            self.store.update_task(task.id, state=TaskState.PLANNING)
            self.expect(task.id, PLANNER, "plan")
            self.store.add_event(
                "queued", task_id=task.id, agent=PLANNER, detail="USER → PLANNER: task"
            )
        self.routing.wake(PLANNER)

    def expect(self, task_id: str, sender: str, typ: str) -> None:
        """The step of ``task_id`` now waits for ``sender``'s ``typ`` block."""
        # The deadline is set again when the prompt is confirmed (deadlines start there).
        deadline = time.time() + self.routing.step_timeout(sender)
        self.store.set_expectation(task_id, sender=sender, type=typ, deadline=deadline)

    def restart_clock(self, task_id: str, sender: str, now: float) -> None:
        """The step's prompt was just confirmed: its deadline starts now."""
        exp = self.store.get_expectation(task_id)
        if exp is None or exp.sender != sender:
            return
        self.store.set_expectation(
            task_id,
            sender=sender,
            type=exp.type,
            deadline=now + self.routing.step_timeout(sender),
            nudged=exp.nudged,
        )

    def _follow_up(self, task: Task, agent: str, kind: str) -> None:
        n = int(self.store.get_meta(f"{kind}s:{task.id}:{agent}") or 0) + 1
        self.store.set_meta(f"{kind}s:{task.id}:{agent}", str(n))
        msg = self.store.add_message(
            task_id=task.id,
            sender="POLI",
            recipient=agent,
            type=kind,
            msg_id=task.id,
            body="",
            header={},
            dedupe_key=f"{kind}:{task.id}:{agent}:{task.round}:{n}",
            ttl=self.routing.step_timeout(agent),
        )
        if msg is not None:
            self.store.add_event(kind, task_id=task.id, agent=agent, detail=f"{kind} {agent}")
        self.routing.wake(agent)

    # --- blocks ---------------------------------------------------------------------------

    def _record(self, name: str, block: Block, rec: decide.Record, task: Task | None) -> None:
        first = self.store.record_block(
            agent=name, task_id=rec.task_id, type=block.type, msg_id=block.id,
            nonce=block.nonce, dedupe_key=block.dedupe_key, header=block.header,
            body=block.body, accepted=rec.accepted, reason=rec.reason,
        )  # fmt: skip
        if first and rec.accepted:
            own = f" ({block.id})" if task is None else ""
            self.store.add_event(
                "block",
                task_id=rec.task_id,
                agent=name,
                detail=f"{name} → {block.to}: {block.type}{own}",
                data={"type": block.type, "to": block.to, "body": block.body},
            )

    def hold(self, name: str, turn: Turn, block: Block, state: AgentState) -> None:
        """The answer is in but the agent is not idle: the turn stays open (HOLDING)."""
        if turn.state is TurnState.HOLDING:
            return
        self.store.set_turn_state(name, turn.nonce, TurnState.HOLDING)
        self.store.add_event(
            "holding",
            task_id=turn.task_id,
            agent=name,
            detail=f"{block.type} block received; {name} is "
            f"{state.value}, so the turn stays open until it is idle",
        )

    def _answered(self, name: str, turn: Turn) -> None:
        """The block answered the turn: its prompt is acknowledged and the turn ends."""
        self.ack_turn(turn)
        self.end_turn(name, turn)

    def _forward(self, name: str, at: At, fw: decide.Forward, task: Task) -> Message | None:
        target, block, turn = fw.target, at.block, at.turn
        assert block is not None and turn is not None
        fwd = self.store.add_message(
            task_id=task.id,
            sender=name,
            recipient=target,
            type=fw.kind,
            msg_id=task.id,
            body=block.body,
            header=block.header,
            nonce=block.nonce,
            dedupe_key=f"{block.dedupe_key}:{target}",
            ttl=self.config.routing.message_ttl,
        )
        # The plan just added counts (not one read again after a restart).
        rounds = at.rounds + (fw.kind == "plan" and fwd is not None)
        self.store.update_task(task.id, state=fw.state, round=rounds, clear=("question",))
        self.expect(task.id, target, fw.expect)
        if fwd is not None:
            self.store.add_event(
                "queued", task_id=task.id, agent=target, detail=f"{name} → {target}: {fw.kind}"
            )
        self._answered(name, turn)
        self.routing.wake(target)
        return fwd

    # --- endings --------------------------------------------------------------------------

    def ack_turn(self, turn: Turn) -> None:
        """The turn's prompt was answered: DELIVERED → ACKNOWLEDGED."""
        if turn.message_id is None:
            return
        msg = self.store.get_message(turn.message_id)
        if msg is not None and msg.state is MessageState.DELIVERED:
            self.store.transition(msg.id, MessageState.ACKNOWLEDGED, expect=MessageState.DELIVERED)

    def end_turn(self, name: str, turn: Turn, reason: TurnEnd = TurnEnd.ANSWERED) -> None:
        """End ``name``'s turn; the follow-ups queued for it die with it."""
        self.store.end_turn(name, turn.nonce, reason)
        driver = self.routing.agents.get(name)
        if driver is not None:
            driver.turn_ended()
        loop = self.routing.loops.get(name)
        if loop is not None and loop.turn_nonce == turn.nonce:
            loop.turn_nonce = None
        # Follow-ups for a turn that is over are moot.
        waiting = (MessageState.QUEUED, MessageState.RETRIED)
        for m in self.store.list_messages(recipient=name, task_id=turn.task_id, state=waiting):
            if m.type in FOLLOW_UPS:
                self.store.transition(m.id, MessageState.DEAD, error="turn already over")

    def end_task_turns(self, task_id: str, reason: TurnEnd, *, resumable: bool = False) -> None:
        """End every open turn of ``task_id``: a finished task never leaves an agent busy.

        Its queued messages die with it, unless the task may be resumed: then only each
        turn's own undelivered prompt does (``poli up --resume`` sends it once, as a copy).
        """
        for turn in self.store.turns_of_task(task_id):
            self.end_turn(turn.agent, turn, reason)
            msg = self.store.get_message(turn.message_id) if turn.message_id else None
            if msg is None:
                continue
            if resumable:
                self.store.set_meta(f"{RESUME_MSG}{task_id}:{turn.agent}", str(msg.id))
            if msg.state is MessageState.DELIVERED:
                self.store.transition(msg.id, MessageState.ACKNOWLEDGED)
            elif msg.state in (MessageState.QUEUED, MessageState.RETRIED):
                self.store.transition(msg.id, MessageState.DEAD, error=f"turn {reason.value}")
        if resumable:
            return
        for m in self.store.list_messages(task_id=task_id):
            if m.state in (MessageState.QUEUED, MessageState.RETRIED, MessageState.PARSED):
                self.store.transition(m.id, MessageState.DEAD, error=f"task {task_id} ended")

    def fail(
        self,
        task_id: str,
        why: str,
        *,
        resumable: TaskState | None = None,
        reason: TurnEnd = TurnEnd.TASK_ENDED,
    ) -> None:
        """Fail an active task: its turns end, its queued messages die, the loops wake."""
        task = self.store.get_task(task_id)
        if task is None or task.state not in (*ACTIVE, TaskState.WAITING_USER):
            return
        with self.store.batch():
            if resumable is not None:
                self.store.set_meta(f"{RESUME_META}{task_id}", resumable.value)
            self.end_task_turns(task_id, reason, resumable=resumable is not None)
            self.store.update_task(task_id, state=TaskState.FAILED, error=why)
            self.store.clear_expectation(task_id)
            self.store.add_event("failed", task_id=task_id, detail=why)
        for name in self.routing.names:
            self.routing.wake(name)
        log.error("task %s failed: %s", task_id, why)

    def _fail(self, f: decide.FailTask) -> None:
        self.fail(f.task_id, f.why, resumable=f.resumable, reason=f.reason)

    def agent_died(self, name: str, evidence: Sequence[str]) -> None:
        """The agent exited: mark it, and fail (resumably) the tasks it had."""
        if name in self.routing.dead:
            return
        self.routing.dead.add(name)
        if name in self.routing.agents:
            self.routing.agents[name].mark_exited()
        screen = " | ".join(evidence)
        self.store.add_event("agent-exited", agent=name, detail=screen)
        turn = self.store.current_turn(name)
        turn_task = turn.task_id if turn else None
        for failure in decide.tasks_of_dead_agent(name, screen, turn_task, self._involved()):
            self._fail(failure)

    def server_gone(self, why: str) -> None:
        """The tmux server died: fail (resumably) every started task and stop routing."""
        if self.routing.fatal is not None:
            return
        self.routing.fatal = why
        for failure in decide.server_gone_failures(why, self._involved()):
            self._fail(failure)
        self.routing.stop()

    def _involved(self) -> list[decide.Involvement]:
        """The active tasks, with the agent each one's step waits for."""
        out = []
        for task in self.store.list_tasks(active_only=True):
            pending = task.state is TaskState.PENDING
            exp = None if pending else self.store.get_expectation(task.id)
            out.append(decide.Involvement(task.id, task.state, exp.sender if exp else None))
        return out


def loop_serves(msg: Message) -> Serves:
    """A loop message's record in the journal of turns."""
    return Serves(Workflow.LOOP, "messages", (msg.id,))


def paused_key(exp: Expectation) -> str:
    """The store meta key of the time a step had left when its agent's limit began."""
    return f"limit-paused:{exp.task_id}:{exp.sender}"
