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


_REPORTABLE: t.Final = (
    TaskStatus.PROCESSING_BY_AGENT,
    TaskStatus.COMPLETED_BY_AGENT,
    TaskStatus.FAILED_BY_AGENT,
)


def report_task(
    queue: TaskQueue,
    task_id: str,
    status: str,
    *,
    message: str = "",
    error: str | None = None,
    redactor: Redactor | None = None,
) -> bool:
    """Move a handed-over task to ``completed_by_agent`` or ``failed_by_agent``.

    ``processing_by_agent`` (the original's optional "started" status) may be reported
    first; it changes nothing but the status.

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
    if new not in _REPORTABLE:
        msg = (
            f"task {task_id}: report processing_by_agent, completed_by_agent or "
            f"failed_by_agent, not {status!r}"
        )
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
        if message or new is not TaskStatus.PROCESSING_BY_AGENT:
            result["message"] = redactor.redact(message)
        if new is TaskStatus.PROCESSING_BY_AGENT:
            raw.update(status=new.value, result=result, updated_at=time.time())
            return True
        raw.update(
            status=new.value,
            result=result,
            error=redactor.redact_opt(error if new is TaskStatus.FAILED_BY_AGENT else None),
            reported_at=time.time(),
            updated_at=time.time(),
        )
    return True
