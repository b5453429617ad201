"""What a person can do from the dashboard or the web page, each tied to the exact question.

A button drawn for one question must not answer the next one: every action carries what
the view showed (the approval's time and command, the task's question, the gate's sequence
number) and is refused with :class:`politerm.errors.StaleAction` when the open question is no
longer that one. The effects go through the same library calls as ``poli approve``,
``poli answer``, ``poli gate`` and ``poli abort``; the workflow running the agent (router,
pipeline runner, driver) presses the keys.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.agents.approval import Decision, answer_pending, get_pending
from politerm.errors import StaleAction, UiError

if t.TYPE_CHECKING:
    import pathlib

    from politerm.config import Config
    from politerm.store import RunStore

GATE_ANSWERS = ("y", "n", "r", "s")


@dataclasses.dataclass(frozen=True)
class ApprovalRef:
    """The approval question a view showed: agent, when it was asked, and the command.

    ``node``: the fleet's node the agent runs on, when the view showed one.
    """

    agent: str
    asked: float
    command: str
    node: str | None = None


def approve(store: RunStore, ref: ApprovalRef, *, deny: bool = False, by: str) -> str:
    """Answer the approval question ``ref`` names; refuse if it is not the open one.

    Returns
    -------
    str
        One line saying what was answered.

    Raises
    ------
    StaleAction
        The agent has no open question, or a different one, or it was already answered.
    """
    pending = get_pending(store, ref.agent)
    if pending is None:
        msg = f"{ref.agent} has no approval question open any more"
        raise StaleAction(msg)
    if pending.asked != ref.asked or pending.command != ref.command:
        msg = f"{ref.agent}'s open question is now {pending.what!r}, not the one shown"
        raise StaleAction(msg)
    if pending.answer is not None:
        msg = f"{ref.agent}'s question was already answered: {pending.answer.value}"
        raise StaleAction(msg)
    decision = Decision.DENY if deny else Decision.APPROVE
    answer_pending(store, ref.agent, decision, by=by)
    store.add_event(
        "ui-action",
        agent=ref.agent,
        detail=f"{by}: {decision.value} {pending.what}",
        data={"action": decision.value, "by": by},
    )
    done = "denied" if deny else "approved"
    return f"{done}: {ref.agent} {pending.what}"


def answer(
    store: RunStore, config: Config, task_id: str, question: str, text: str, *, by: str = "ui"
) -> str:
    """Answer the question task ``task_id`` waits on, if it is still ``question``.

    ``by`` (``web``, ``web:DEVICE``, ``dash``) goes into the event log with the answer.

    Raises
    ------
    StaleAction
        The task waits on no question, or on another one.
    UiError
        The answer is empty.
    """
    from politerm.engine.loop import answer as loop_answer

    if not text.strip():
        msg = "the answer is empty"
        raise UiError(msg)
    loop_answer(store, config, task_id, text, question=question, by=by)
    return f"answered task {task_id}"


def gate(project: pathlib.Path, run_id: str, seq: int, reply: str, *, by: str) -> str:
    """Answer gate number ``seq`` of pipeline run ``run_id`` with ``y``, ``n``, ``r`` or ``s``.

    Raises
    ------
    StaleAction
        The run waits on no question, or on a later one.
    UiError
        ``reply`` is not one of the gate answers.
    """
    from politerm.pipeline.ops import open_project
    from politerm.pipeline.state import answer_question, read_question

    reply = reply.lower()
    if reply not in GATE_ANSWERS:
        msg = f"a gate answer is one of {', '.join(GATE_ANSWERS)}, not {reply!r}"
        raise UiError(msg)
    _, store = open_project(project)
    try:
        question = read_question(store, run_id)
        if question is None or question.get("answer") is not None:
            msg = f"run {run_id} is not waiting at a gate any more"
            raise StaleAction(msg)
        if int(question.get("seq", 0)) != seq:
            msg = f"run {run_id} now asks question {question.get('seq')}, not {seq}"
            raise StaleAction(msg)
        answer_question(store, run_id, reply, by=by)
    finally:
        store.close()
    return f"step {question['step']}: answered {reply}"


async def abort(store: RunStore, config: Config, task_id: str, *, by: str = "ui") -> str:
    """Abort task ``task_id`` (interrupts the agents working on it); ``by`` is logged.

    Raises
    ------
    StaleAction
        The task has already ended.
    """
    from politerm.engine.loop import abort as loop_abort
    from politerm.store.models import TaskState

    task = store.get_task(task_id)
    ended = (TaskState.DONE, TaskState.FAILED, TaskState.ABORTED)
    if task is None or task.state in ended:
        msg = f"task {task_id} has already ended"
        raise StaleAction(msg)
    await loop_abort(config, store, task_id)
    store.add_event(
        "ui-action", task_id=task_id, detail=f"{by}: aborted", data={"action": "abort", "by": by}
    )
    return f"aborted task {task_id}"
