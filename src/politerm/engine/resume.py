"""``poli up --resume``: what goes back in flight once the dead agents run again.

An agent restarted by a resume is a new process: whatever the dead one was given (a prompt
it was answering, one being typed into its box) went with it, and its old screen is no
evidence of anything the new one saw. So before any router routes to it:

- its open turn ends (``resumed``) — the prompt of a turn that was WAITING or HOLDING is to
  be sent again; a message found DELIVERING goes back to QUEUED (the new process provably
  has nothing in its box), so the router sends it like any other;
- every task that failed because an agent or the tmux server died goes back to the state it
  failed in;
- each prompt lost that way is queued again as one copy, unless a copy is still on its way
  (QUEUED, RETRIED or DELIVERING: that one is sent instead), or it was delivered to an
  agent that is still the same process (the copy would be a duplicate).

Each step is written before anything is typed, so a resume interrupted halfway and run
again sends nothing twice.
"""

from __future__ import annotations

import time
import typing as t

from politerm.engine.routebase import ACTIVE, FOLLOW_UPS, PLANNER, RESUME_META, RESUME_MSG
from politerm.store.models import MessageState, TaskState, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.store import RunStore
    from politerm.store.models import Task

# A copy of a lost prompt is not needed while one of these is still to be sent or settled.
_ON_ITS_WAY = frozenset({MessageState.QUEUED, MessageState.RETRIED, MessageState.DELIVERING})
# States of a message that reached an agent process.
_REACHED = frozenset({MessageState.DELIVERED, MessageState.ACKNOWLEDGED})


def resume_work(
    store: RunStore,
    config: Config,
    restarted: t.Collection[str],
    say: t.Callable[[str], None] = lambda _msg: None,
) -> None:
    """Put back in flight what died with the agents in ``restarted`` (or the tmux server).

    Parameters
    ----------
    store
        The run store of the session.
    config
        Agents and step timeouts.
    restarted
        The agents this resume started anew (their previous process is gone).
    say
        Progress lines for the user.
    """
    for name in restarted:
        with store.batch():
            _forget_lost_delivery(store, name)
    for task in store.list_tasks():
        previous = store.get_meta(f"{RESUME_META}{task.id}")
        with store.batch():
            if task.state is TaskState.FAILED and previous:
                _reopen(store, config, task, TaskState(previous))
                say(f"task {task.id}: resumed ({previous})")
            elif task.state not in ACTIVE:
                continue
            for name in config.agents:
                _resend_once(store, task.id, name, restarted=name in restarted, say=say)


def _forget_lost_delivery(store: RunStore, name: str) -> None:
    """End the open turn of a restarted agent; remember its prompt to be sent again."""
    turn = store.current_turn(name)
    if turn is not None:
        store.end_turn(name, turn.nonce, TurnEnd.RESUMED)
        msg = store.get_message(turn.message_id) if turn.message_id is not None else None
        if msg is not None and msg.task_id is not None:
            if msg.state is MessageState.DELIVERED:
                # The process that got it is gone: it is over, and a copy takes its place.
                store.transition(msg.id, MessageState.ACKNOWLEDGED)
            if turn.state is not TurnState.DELIVERING or msg.state in _REACHED:
                store.set_meta(f"{RESUME_MSG}{msg.task_id}:{name}", str(msg.id))
        for m in store.list_messages(recipient=name, task_id=turn.task_id):
            if m.type in FOLLOW_UPS and m.state in (MessageState.QUEUED, MessageState.RETRIED):
                store.transition(m.id, MessageState.DEAD, error="its agent was restarted")
    for msg in store.in_flight(name):
        if msg.type in FOLLOW_UPS:
            store.transition(msg.id, MessageState.DEAD, error="its agent was restarted")
        else:
            # The new process has an empty box and never saw it: send it like a new one.
            store.transition(
                msg.id, MessageState.QUEUED, expect=MessageState.DELIVERING,
                error="its agent was restarted before the delivery was confirmed",
            )  # fmt: skip
            store.add_event(
                "requeued",
                task_id=msg.task_id,
                agent=name,
                detail=f"{msg.type} message was mid-delivery when {name} died; sent again",
            )


def _reopen(store: RunStore, config: Config, task: Task, state: TaskState) -> None:
    """A task failed because an agent or the server died goes back to ``state``."""
    store.update_task(task.id, state=state, clear=("error",))
    store.set_meta(f"{RESUME_META}{task.id}", "")
    exp = store.get_expectation(task.id)
    sender = exp.sender if exp else (PLANNER if state is TaskState.PLANNING else "EXECUTER")
    timeouts = config.timeouts
    total = timeouts.plan if sender == PLANNER else timeouts.exec
    # The clock restarts when the step's prompt is confirmed delivered.
    store.set_expectation(
        task.id,
        sender=sender,
        type=exp.type if exp else ("plan" if sender == PLANNER else "result"),
        deadline=time.time() + total,
    )
    store.add_event("resumed", task_id=task.id, detail=f"back to {state.value}")


def _resend_once(
    store: RunStore, task_id: str, name: str, *, restarted: bool, say: t.Callable[[str], None]
) -> None:
    """Queue one copy of the prompt ``name`` lost for ``task_id``, if it needs one."""
    key = f"{RESUME_MSG}{task_id}:{name}"
    raw = store.get_meta(key)
    if not raw:
        return
    store.set_meta(key, "")
    msg = store.get_message(int(raw))
    if msg is None:
        return
    root = msg.dedupe_key.split(":resume")[0]
    copies = [
        m
        for m in store.list_messages(task_id=task_id, recipient=name)
        if m.dedupe_key == root or m.dedupe_key.startswith(f"{root}:resume")
    ]
    if any(m.state in _ON_ITS_WAY for m in copies):
        return  # that one is sent (or settled from the screen) instead
    if not restarted and any(m.state in _REACHED for m in copies):
        return  # the same process has it: a copy would be a duplicate
    store.add_message(
        task_id=task_id,
        sender=msg.sender,
        recipient=msg.recipient,
        type=msg.type,
        msg_id=msg.msg_id,
        body=msg.body,
        header=msg.header,
        nonce=msg.nonce,
        dedupe_key=f"{root}:resume{len(copies)}",
    )
    store.add_event(
        "requeued", task_id=task_id, agent=name, detail=f"{msg.type} message sent again"
    )
    say(f"task {task_id}: the {msg.type} message to {name} is sent again")


__all__ = ["resume_work"]
