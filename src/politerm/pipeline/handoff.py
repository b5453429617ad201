"""Handoff files: how steps pass notes to each other.

``poli run`` writes ``.handoff.md`` with the user's task. Every step reads it first and
updates it when done; steps of a parallel group write ``.handoff-step-N.md`` instead, and at
the group's sync point those are appended to ``.handoff.md`` in step order under
``## Parallel Step N (<agent>) — <timestamp>`` headers. The originals are kept.

Handoff files live in the project, for the agents to read; politerm writes them 0600 and with
secrets redacted.
"""

from __future__ import annotations

import datetime
import typing as t

from politerm._internal.private import write_private
from politerm.redact import Redactor

if t.TYPE_CHECKING:
    import pathlib

HANDOFF = ".handoff.md"


def step_file(num: int) -> str:
    """The handoff file of a parallel step.

    Examples
    --------
    >>> step_file(3)
    '.handoff-step-3.md'
    """
    return f".handoff-step-{num}.md"


def write_initial(
    project: pathlib.Path,
    task: str,
    pipeline: str,
    run_id: str,
    *,
    redactor: Redactor | None = None,
) -> pathlib.Path:
    """Write ``.handoff.md`` with the user's task (replacing an older one).

    The file is 0600 and secrets in the task are redacted: agents get the task itself in
    their prompt; the handoff is what politerm keeps on disk.
    """
    path = project / HANDOFF
    task = (redactor or Redactor()).redact(task.strip())
    write_private(path, f"# Handoff\n\nPipeline: {pipeline} (run {run_id})\n\n## Task\n\n{task}\n")
    return path


def _marker(run_id: str, num: int, attempt: int) -> str:
    return f"<!-- poli:merged run={run_id} step={num} attempt={attempt} -->"


def merge_parallel(
    project: pathlib.Path,
    steps: t.Sequence[tuple[int, str, int]],
    run_id: str,
    *,
    sources: t.Mapping[int, pathlib.Path] | None = None,
    now: datetime.datetime | None = None,
    redactor: Redactor | None = None,
) -> list[int]:
    """Append each parallel step's handoff file to ``.handoff.md``, in step order.

    Parameters
    ----------
    project
        Where ``.handoff.md`` is.
    steps
        ``(number, agent, attempt)`` of the group's steps.
    run_id
        Marks each merged section so a resumed run never merges one twice.
    sources
        Where a step's ``.handoff-step-N.md`` is, when not in ``project`` (a worktree).
    now
        The timestamp in the headers.
    redactor
        Redacts secrets the steps wrote (the built-in patterns when left out).

    Returns
    -------
    list of int
        The steps merged by this call.
    """
    path = project / HANDOFF
    text = path.read_text(encoding="utf-8") if path.exists() else "# Handoff\n"
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    merged: list[int] = []
    for num, agent, attempt in sorted(steps):
        marker = _marker(run_id, num, attempt)
        if marker in text:
            continue
        src = (sources or {}).get(num, project) / step_file(num)
        try:
            body = src.read_text(encoding="utf-8").strip()
        except OSError:
            body = f"(step {num} wrote no {step_file(num)})"
        if not text.endswith("\n"):
            text += "\n"
        text += f"\n{marker}\n## Parallel Step {num} ({agent}) — {stamp}\n\n{body}\n"
        merged.append(num)
    if merged:
        write_private(path, (redactor or Redactor()).redact(text))
    return merged
