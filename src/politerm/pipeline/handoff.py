"""Handoff files: how steps pass notes to each other.

``poli run`` writes ``.handoff.md`` with the user's task. Every step reads it first and
updates it when done; steps of a parallel group write ``.handoff-step-N.md`` instead, and at
the group's sync point those are appended to ``.handoff.md`` in step order under
``## Parallel Step N (<agent>) — <timestamp>`` headers. The originals are kept.
"""

from __future__ import annotations

import datetime
import typing as t

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


def write_initial(project: pathlib.Path, task: str, pipeline: str, run_id: str) -> pathlib.Path:
    """Write ``.handoff.md`` with the user's task (replacing an older one)."""
    path = project / HANDOFF
    path.write_text(
        f"# Handoff\n\nPipeline: {pipeline} (run {run_id})\n\n## Task\n\n{task.strip()}\n",
        encoding="utf-8",
    )
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
        tmp = path.with_name(f"{HANDOFF}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return merged
