"""Handoff files: how steps pass notes to each other.

``poli run`` writes ``.handoff.md`` with the user's task. Every step reads it first and
updates it when done; steps of a parallel group write ``.handoff-step-N.md`` instead, and at
the group's sync point those are appended to ``.handoff.md`` in step order under
``## Parallel Step N (<agent>) — <timestamp>`` headers. The originals are kept.

Handoff files live in the project, for the agents to read; politerm writes them 0600 and with
secrets redacted.

A :class:`Layout` with a directory names them as META's prompts do: ``.meta/handoff.md`` and
``.meta/handoff-step-N.md``. A pipeline from a META repository gets that layout; the
``[pipeline] handoff_dir`` setting chooses one for any pipeline. The prompt, the merge and the
dry run all read the names from the same layout, so they always agree.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import typing as t

from politerm._internal.private import write_private
from politerm.redact import Redactor

HANDOFF = ".handoff.md"
#: Where a pipeline from a META repository keeps its handoff files.
META_DIR = ".meta"


def step_file(num: int) -> str:
    """The handoff file of a parallel step.

    Examples
    --------
    >>> step_file(3)
    '.handoff-step-3.md'
    """
    return f".handoff-step-{num}.md"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the handoff files are, relative to the project.

    Examples
    --------
    >>> Layout().main, Layout().step(2)
    ('.handoff.md', '.handoff-step-2.md')
    >>> Layout(".meta").main, Layout(".meta").step(2)
    ('.meta/handoff.md', '.meta/handoff-step-2.md')
    """

    directory: str = ""

    @property
    def main(self) -> str:
        """The shared handoff file."""
        return f"{self.directory}/handoff.md" if self.directory else HANDOFF

    def step(self, num: int) -> str:
        """A parallel step's own handoff file."""
        return f"{self.directory}/handoff-step-{num}.md" if self.directory else step_file(num)

    @property
    def step_pattern(self) -> str:
        """A glob matching every step file."""
        return self.step(0).replace("-0.md", "-*.md")


CLASSIC = Layout()


def layout_for(pipeline: pathlib.Path | None, setting: str | None = None) -> Layout:
    """The layout of a run: the setting, else META's for a pipeline from a META repository.

    Examples
    --------
    >>> layout_for(pathlib.Path("/r/META/workflows/pipelines/feature.pipeline")).main
    '.meta/handoff.md'
    >>> layout_for(pathlib.Path("/p/.poli/pipelines/x.pipeline")).main
    '.handoff.md'
    >>> layout_for(None, "notes").main
    'notes/handoff.md'
    """
    from politerm.pipeline.agents import meta_root

    if setting is not None:
        return Layout(setting.strip("/") if setting.strip("/.") else "")
    return Layout(META_DIR) if meta_root(pipeline) is not None else CLASSIC


def write_initial(
    project: pathlib.Path,
    task: str,
    pipeline: str,
    run_id: str,
    *,
    redactor: Redactor | None = None,
    layout: Layout = CLASSIC,
) -> pathlib.Path:
    """Write ``.handoff.md`` with the user's task (replacing an older one).

    The file is 0600 and secrets in the task are redacted: agents get the task itself in
    their prompt; the handoff is what politerm keeps on disk.
    """
    path = project / layout.main
    path.parent.mkdir(parents=True, exist_ok=True)
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
    layout: Layout = CLASSIC,
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
    layout
        The handoff file names.

    Returns
    -------
    list of int
        The steps merged by this call.
    """
    path = project / layout.main
    text = path.read_text(encoding="utf-8") if path.exists() else "# Handoff\n"
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    merged: list[int] = []
    for num, agent, attempt in sorted(steps):
        marker = _marker(run_id, num, attempt)
        if marker in text:
            continue
        src = (sources or {}).get(num, project) / layout.step(num)
        try:
            body = src.read_text(encoding="utf-8").strip()
        except OSError:
            body = f"(step {num} wrote no {layout.step(num)})"
        if not text.endswith("\n"):
            text += "\n"
        text += f"\n{marker}\n## Parallel Step {num} ({agent}) — {stamp}\n\n{body}\n"
        merged.append(num)
    if merged:
        write_private(path, (redactor or Redactor()).redact(text))
    return merged
