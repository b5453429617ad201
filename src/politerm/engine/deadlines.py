"""New tasks, step deadlines, nudges and retries: the router's store-side bookkeeping.

A step's deadline runs from the moment its prompt is confirmed delivered, never from when
it was queued: a prompt waiting behind other tasks' prompts is not late. While the prompt
that starts a step is still queued or being delivered, the step's clock does not run.
Nudges and retries belong to their turn and are delivered ahead of other tasks' messages.
A timeout names what happened in the turn: blocks rejected and why, a pending approval,
and whether the nudge and the retry were actually delivered.
"""

from __future__ import annotations

import time
import typing as t

from politerm.agents.state import AgentState
from politerm.driver.blocks import rejected_fact
from politerm.engine import decide
from politerm.engine.routebase import FOLLOW_UPS, PLANNER
from politerm.store.models import MessageState, TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.engine.routebase import Endings, Routing
    from politerm.store.models import Expectation, Task

_UNDELIVERED = (
    MessageState.QUEUED,
    MessageState.RETRIED,
    MessageState.DELIVERING,
    MessageState.PARSED,
)


def _paused_key(exp: Expectation) -> str:
    """The store meta key of the time a step had left when its agent's limit began."""
    return f"limit-paused:{exp.task_id}:{exp.sender}"


class Deadlines:
    """Tasks, the clocks of their steps, and follow-ups (a part of the router).

    Parameters
    ----------
    routing
        The router's shared state.
    endings
        Fails a task whose step timed out.
    """

    def __init__(self, routing: Routing, endings: Endings) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.endings = endings

    def expect(self, task_id: str, sender: str, typ: str) -> None:
        """The step of ``task_id`` now waits for ``sender``'s ``typ`` block."""
        # The deadline is set again when the prompt is confirmed (deadlines start there).
        self.store.set_expectation(
            task_id,
            sender=sender,
            type=typ,
            deadline=time.time() + self.routing.step_timeout(sender),
        )

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

    def _waiting_for_delivery(self, exp: Expectation) -> bool:
        """Whether the prompt that starts this step has not reached the agent yet."""
        for m in self.store.list_messages(recipient=exp.sender, task_id=exp.task_id):
            if m.type not in FOLLOW_UPS and m.state in _UNDELIVERED:
                return True
        return False

    def check(self, now: float) -> None:
        """Carry out what each step's clock calls for at ``now`` (a store tick)."""
        for exp in self.store.list_expectations():
            task = self.store.get_task(exp.task_id)
            action = decide.step_clock(self._clock(exp, task, now), now)
            if action is not None:
                self._carry_clock(exp, task, action)

    def _clock(self, exp: Expectation, task: Task | None, now: float) -> decide.StepClock:
        """The facts of one step's clock the decision needs (read only as far as needed)."""
        state = task.state if task is not None else None
        clocked = state in (TaskState.PLANNING, TaskState.EXECUTING, TaskState.PENDING)
        undelivered = clocked and self._waiting_for_delivery(exp)
        driver = self.routing.agents.get(exp.sender)
        left = self.store.get_meta(_paused_key(exp)) if clocked and not undelivered else None
        due = clocked and now >= exp.deadline
        retries = self.store.get_meta(f"retries:{exp.task_id}:{exp.sender}") if due else None
        return decide.StepClock(
            task_id=exp.task_id,
            task_state=state,
            sender=exp.sender,
            deadline=exp.deadline,
            total=self.routing.step_timeout(exp.sender),
            nudged=exp.nudged,
            nudge_fraction=self.config.timeouts.nudge_fraction,
            undelivered=undelivered,
            sender_dead=exp.sender in self.routing.dead,
            limited=driver is not None and driver.state is AgentState.LIMITED,
            paused_left=float(left) if left else None,
            retries=int(retries or 0),
        )

    def _carry_clock(self, exp: Expectation, task: Task | None, action: decide.ClockAction) -> None:
        """Carry out what a step's clock called for."""
        key, name = _paused_key(exp), exp.sender
        match action:
            case decide.ClearClock():
                self.store.clear_expectation(exp.task_id)
            case decide.FailTask():
                self.endings.carry_fail(action)
            case decide.PauseClock(left=left):
                self.store.set_meta(key, repr(left))
                self.store.add_event(
                    "deadline-paused",
                    task_id=exp.task_id,
                    agent=name,
                    detail=f"{name} is limited: the {exp.type} step's clock stops",
                )
            case decide.ResumeClock(deadline=deadline, left=left):
                self.store.set_meta(key, "")
                self.store.set_expectation(
                    exp.task_id, sender=name, type=exp.type, deadline=deadline, nudged=exp.nudged
                )
                self.store.add_event(
                    "deadline-resumed",
                    task_id=exp.task_id,
                    agent=name,
                    detail=f"{name}'s limit ended: {left:.0f}s left for the {exp.type} step",
                )
            case decide.Nudge() if task is not None:
                self.store.mark_nudged(exp.task_id)
                self._follow_up(task, name, "nudge")
            case decide.RetryStep(deadline=deadline, retries=retries) if task is not None:
                self.store.set_meta(f"retries:{task.id}:{name}", str(retries))
                self.store.set_expectation(
                    task.id, sender=name, type=exp.type, deadline=deadline, nudged=True
                )
                self._follow_up(task, name, "retry")
            case decide.TimedOut(total=total) if task is not None:
                why = self._timeout_message(task, exp, total)
                self.endings.fail(task.id, why, reason=TurnEnd.TIMED_OUT)

    def _timeout_message(self, task: Task, exp: Expectation, total: float) -> str:
        step = decide.step_name(exp.sender)
        driver = self.routing.agents.get(exp.sender)
        # From the task's events, not the driver's turn: a nudge begins a new turn, and the
        # router refuses blocks of its own (addressed to no agent, another task's id).
        events = [
            e
            for e in self.store.list_events(task_id=task.id, limit=500)
            if e.agent == exp.sender and e.kind in ("rejected", "ignored")
        ]
        facts = [
            rejected_fact(
                [e.detail for e in events if e.kind == "rejected"],
                sum(e.kind == "ignored" for e in events),
            )
        ]
        if driver is not None:
            pending = driver.pending_approval
            if pending is not None:
                facts.append(f"approval pending: {pending.what}")
            # Follow-ups go only to a READY agent, and an answer read while it was busy
            # waits (held) for it to be idle: say where the step stood.
            turn = self.store.current_turn(exp.sender)
            where = f"its turn {turn.state.value}" if turn is not None else "no open turn"
            held = (
                len(self.routing.loops[exp.sender].held) if exp.sender in self.routing.loops else 0
            )
            facts.append(f"{exp.sender} reads {driver.state.value}, {where}, {held} block(s) held")
        for kind in FOLLOW_UPS:
            sent = [
                m
                for m in self.store.list_messages(recipient=exp.sender, task_id=task.id)
                if m.type == kind
            ]
            delivered = any(
                m.state in (MessageState.DELIVERED, MessageState.ACKNOWLEDGED) for m in sent
            )
            how = "delivered" if delivered else "queued, not delivered" if sent else "not sent"
            facts.append(f"{kind} {how}")
        lines = driver.last_words(6) if driver else []
        return (
            f"{exp.sender} sent no {exp.type} block for task {task.id} in the {step} step "
            f"within {total:g}s ({'; '.join(facts)}); last on its screen: " + " | ".join(lines)
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
