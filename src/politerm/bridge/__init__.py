"""The task bridge (``poli bridge``): a typed task queue that other programs fill.

Tasks are executed by politerm itself or by an agent, and commands go through a runner
that never hangs.

Layers: :mod:`~politerm.bridge.models` (pydantic models, status enums, transitions, JSON
Schemas), :mod:`~politerm.bridge.queue` (the locked, atomic queue file),
:mod:`~politerm.bridge.edits` (exact file modifications), :mod:`~politerm.bridge.runner`
(one command, three timeouts), :mod:`~politerm.bridge.executor` (built-in executor, step
journal), :mod:`~politerm.bridge.agent` (agent executor), :mod:`~politerm.bridge.bridge`
(the loop), :mod:`~politerm.bridge.daemon` (foreground, daemon, stop).
"""

from __future__ import annotations

import typing as t

from politerm._internal.lazy import lazy_names

if t.TYPE_CHECKING:
    from politerm.bridge.models import (
        AgentActionDetails,
        CommandExecutionInstruction,
        FileAction,
        FileModificationInstruction,
        InstructionDetails,
        Task,
        TaskStatus,
        Tool,
    )
    from politerm.bridge.queue import TaskQueue

# Imported on first use: the detached runner (``python -m politerm.bridge.runner``) starts
# once per command and should not pay for the task models it never uses.
_LAZY = {
    "AgentActionDetails": "models",
    "CommandExecutionInstruction": "models",
    "FileAction": "models",
    "FileModificationInstruction": "models",
    "InstructionDetails": "models",
    "Task": "models",
    "TaskStatus": "models",
    "Tool": "models",
    "TaskQueue": "queue",
}

__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "AgentActionDetails",
    "CommandExecutionInstruction",
    "FileAction",
    "FileModificationInstruction",
    "InstructionDetails",
    "Task",
    "TaskQueue",
    "TaskStatus",
    "Tool",
]
