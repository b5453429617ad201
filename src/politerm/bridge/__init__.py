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
