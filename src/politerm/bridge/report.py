"""An executor's report on a handed-over task (``poli bridge report``, agents' blocks)."""

from __future__ import annotations

import time
import typing as t

from politerm.bridge.models import TaskStatus, check_transition
from politerm.bridge.queue import find
from politerm.errors import BridgeTaskInvalid
from politerm.redact import Redactor

if t.TYPE_CHECKING:
    from politerm.bridge.queue import TaskQueue


def report_task(
    queue: TaskQueue,
    task_id: str,
    status: str,
    *,
    message: str = "",
    error: str | None = None,
    redactor: Redactor | None = None,
) -> bool:
    """Move a ``pending_agent_action`` task to ``completed_by_agent`` or ``failed_by_agent``.

    Returns
    -------
    bool
        True if the report was recorded; False if the very same report was already there
        (an agent that reports twice changes nothing).

    Raises
    ------
    BridgeTaskInvalid
        Unknown task, a status other than the two an agent may report, or a task that is
        not waiting for an agent.
    """
    redactor = redactor or Redactor()
    try:
        new = TaskStatus(status)
    except ValueError:
        new = None
    if new not in (TaskStatus.COMPLETED_BY_AGENT, TaskStatus.FAILED_BY_AGENT):
        msg = f"task {task_id}: report completed_by_agent or failed_by_agent, not {status!r}"
        raise BridgeTaskInvalid(msg)
    with queue.update() as tasks:
        raw = find(tasks, task_id)
        if raw is None:
            msg = f"task {task_id}: not in {queue.path}"
            raise BridgeTaskInvalid(msg)
        try:
            old = TaskStatus(raw.get("status"))
        except ValueError:
            msg = f"task {task_id}: has an unknown status {raw.get('status')!r}"
            raise BridgeTaskInvalid(msg) from None
        if old is new:
            return False
        check_transition(task_id, old, new)
        result = dict(raw.get("result") or {})
        result["message"] = redactor.redact(message)
        raw.update(
            status=new.value,
            result=result,
            error=redactor.redact_opt(error if new is TaskStatus.FAILED_BY_AGENT else None),
            reported_at=time.time(),
            updated_at=time.time(),
        )
    return True
