"""New tasks, step deadlines, nudges and retries: the router's store-side bookkeeping.

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
from politerm.engine.effects import BlockEffects
from politerm.engine.routebase import FOLLOW_UPS, PLANNER
from politerm.store.models import MessageState, TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.store.models import Expectation, Task

_UNDELIVERED = (
    MessageState.QUEUED,
    MessageState.RETRIED,
    MessageState.DELIVERING,
    MessageState.PARSED,
)


class Deadlines(BlockEffects):
    """Tasks, deadlines and follow-ups (part of the router)."""

    def _start_task(self, task: Task) -> None:
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
            self._expect(task.id, PLANNER, "plan")
            self.store.add_event(
                "queued", task_id=task.id, agent=PLANNER, detail="USER → PLANNER: task"
            )
        self.wake(PLANNER)

    def _restart_clock(self, task_id: str, sender: str, now: float) -> None:
        """The step's prompt was just confirmed: its deadline starts now."""
        exp = self.store.get_expectation(task_id)
        if exp is None or exp.sender != sender:
            return
        self.store.set_expectation(
            task_id,
            sender=sender,
            type=exp.type,
            deadline=now + self._step_timeout(sender),
            nudged=exp.nudged,
        )

    def _waiting_for_delivery(self, exp: Expectation) -> bool:
        """Whether the prompt that starts this step has not reached the agent yet."""
        for m in self.store.list_messages(recipient=exp.sender, task_id=exp.task_id):
            if m.type not in FOLLOW_UPS and m.state in _UNDELIVERED:
                return True
        return False

    def _check_deadlines(self, now: float) -> None:
        for exp in self.store.list_expectations():
            task = self.store.get_task(exp.task_id)
            if task is None or task.state not in (
                TaskState.PLANNING,
                TaskState.EXECUTING,
                TaskState.PENDING,
            ):
                if task is None or task.state.is_terminal:
                    self.store.clear_expectation(exp.task_id)
                continue
            if self._waiting_for_delivery(exp):
                if exp.sender in self._dead:
                    # Its prompt can never be delivered: fail it resumably, not wait forever.
                    self._fail(
                        task.id,
                        f"agent {exp.sender} exited before it got its prompt for task {task.id}; "
                        "run `poli up --resume` to restart it and continue",
                        resumable=task.state,
                        reason=TurnEnd.AGENT_DIED,
                    )
                continue  # its clock starts at confirmed delivery
            if self._paused_for_limit(task, exp, now):
                continue
            total = self._step_timeout(exp.sender)
            started = exp.deadline - total
            if not exp.nudged and now >= started + total * self.config.timeouts.nudge_fraction:
                self.store.mark_nudged(exp.task_id)
                self._follow_up(task, exp.sender, "nudge")
                continue
            if now < exp.deadline:
                continue
            retries = int(self.store.get_meta(f"retries:{task.id}:{exp.sender}") or 0)
            if retries < 1:
                self.store.set_meta(f"retries:{task.id}:{exp.sender}", str(retries + 1))
                self.store.set_expectation(
                    task.id, sender=exp.sender, type=exp.type, deadline=now + total, nudged=True
                )
                self._follow_up(task, exp.sender, "retry")
                continue
            self._fail(task.id, self._timeout_message(task, exp, total), reason=TurnEnd.TIMED_OUT)

    def _paused_for_limit(self, task: Task, exp: Expectation, now: float) -> bool:
        """While the step's agent waits for a usage limit to reset, its clock stands still.

        The time left is kept in the store when the limit starts (so a restarted router
        keeps it), and the deadline is set that far from the moment the limit ends.
        """
        key = f"limit-paused:{task.id}:{exp.sender}"
        driver = self.agents.get(exp.sender)
        limited = driver is not None and driver.state is AgentState.LIMITED
        left = self.store.get_meta(key)
        if limited:
            if not left:
                self.store.set_meta(key, repr(max(0.0, exp.deadline - now)))
                self.store.add_event(
                    "deadline-paused",
                    task_id=task.id,
                    agent=exp.sender,
                    detail=f"{exp.sender} is limited: the {exp.type} step's clock stops",
                )
            return True
        if left:
            self.store.set_meta(key, "")
            self.store.set_expectation(
                task.id,
                sender=exp.sender,
                type=exp.type,
                deadline=now + float(left),
                nudged=exp.nudged,
            )
            self.store.add_event(
                "deadline-resumed",
                task_id=task.id,
                agent=exp.sender,
                detail=f"{exp.sender}'s limit ended: {float(left):.0f}s left "
                f"for the {exp.type} step",
            )
            return True
        return False

    def _timeout_message(self, task: Task, exp: Expectation, total: float) -> str:
        step = "plan" if exp.sender == PLANNER else "exec"
        driver = self.agents.get(exp.sender)
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
            held = len(self.loops[exp.sender].held) if exp.sender in self.loops else 0
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
            ttl=self._step_timeout(agent),
        )
        if msg is not None:
            self.store.add_event(kind, task_id=task.id, agent=agent, detail=f"{kind} {agent}")
        self.wake(agent)
