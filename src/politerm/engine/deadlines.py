"""The clocks of the steps: what each calls for at a store tick (nudge, retry, timeout).

A step's deadline runs from the moment its prompt is confirmed delivered, never from when
it was queued: a prompt waiting behind other tasks' prompts is not late. While the prompt
that starts a step is still queued or being delivered, the step's clock does not run.
Nudges and retries belong to their turn and are delivered ahead of other tasks' messages.
A timeout names what happened in the turn: blocks rejected and why, a pending approval,
and whether the nudge and the retry were actually delivered.
"""

from __future__ import annotations

import typing as t

from politerm.agents.state import AgentState
from politerm.driver.blocks import rejected_fact
from politerm.engine import decide
from politerm.engine.decide import FOLLOW_UPS
from politerm.engine.execute import At, paused_key
from politerm.store.models import MessageState, TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.engine.execute import Executor
    from politerm.engine.routebase import Routing
    from politerm.store.models import Expectation, Task

_UNDELIVERED = (
    MessageState.QUEUED,
    MessageState.RETRIED,
    MessageState.DELIVERING,
    MessageState.PARSED,
)


class Deadlines:
    """The clocks of the tasks' steps (a part of the router): facts gathered, then decided.

    Parameters
    ----------
    routing
        The router's shared state.
    executor
        Carries out what a clock calls for.
    """

    def __init__(self, routing: Routing, executor: Executor) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.executor = executor

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
            if isinstance(action, decide.TimedOut) and task is not None:
                why = self._timeout_message(task, exp, action.total)
                action = decide.FailTask(task.id, why, TurnEnd.TIMED_OUT)
            if action is not None:
                self.executor.carry((action,), At(exp.sender, task=task, exp=exp))

    def _clock(self, exp: Expectation, task: Task | None, now: float) -> decide.StepClock:
        """The facts of one step's clock the decision needs (read only as far as needed)."""
        state = task.state if task is not None else None
        clocked = state in (TaskState.PLANNING, TaskState.EXECUTING, TaskState.PENDING)
        undelivered = clocked and self._waiting_for_delivery(exp)
        driver = self.routing.agents.get(exp.sender)
        left = self.store.get_meta(paused_key(exp)) if clocked and not undelivered else None
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
