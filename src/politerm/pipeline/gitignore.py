"""Keep a run's own files out of the user's ``git status``.

A pipeline run writes files the user did not ask for: its state, step prompts and logs and
worktrees under ``.poli/``, and the handoff notes (``.handoff.md``, ``.handoff-step-N.md``,
or ``.meta/…`` for a META pipeline, or under ``[pipeline] handoff_dir``) in the project,
where the agents read them. None of them belongs in the user's commits, so a run in a git
checkout:

- writes ``.poli/.gitignore`` (when absent) ignoring everything in ``.poli/`` except the
  user's own definitions there: ``pipelines/``, ``agents/`` and ``prompts/``;
- adds the handoff files' names, anchored at the project, to the repository's
  ``info/exclude`` (git's local ignore list: never committed, never shared), once.

Nothing is written outside a git checkout, and nothing already tracked changes: git keeps
tracking a file it tracks, ignored or not.
"""

from __future__ import annotations

import pathlib
import subprocess
import typing as t

from politerm._internal.private import write_private

if t.TYPE_CHECKING:
    from politerm.pipeline.handoff import Layout

#: ``.poli/.gitignore``: run files ignored, the user's definitions kept visible.
POLI_GITIGNORE: t.Final = """\
# Written by politerm: a run's files here (state, step logs, worktrees, queues) stay out of
# git; your own pipelines, agents and prompts do not. Delete this file to track everything.
*
!/pipelines/
!/pipelines/**
!/agents/
!/agents/**
!/prompts/
!/prompts/**
"""

_MARK: t.Final = "# politerm: pipeline handoff files (docs/pipelines.md)"


def _git(project: pathlib.Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=project, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git, or a hung one: the run goes on, only git status is noisier
    return proc.stdout.strip() if proc.returncode == 0 else None


def exclude_patterns(relative: str, layout: Layout) -> list[str]:
    """The ``info/exclude`` lines for the handoff files of a project at ``relative``.

    Examples
    --------
    >>> from politerm.pipeline.handoff import Layout
    >>> exclude_patterns("", Layout())
    ['/.handoff.md', '/.handoff-step-*.md']
    >>> exclude_patterns("app", Layout(".meta"))
    ['/app/.meta/handoff.md', '/app/.meta/handoff-step-*.md']
    """
    base = f"/{relative.strip('/')}/" if relative.strip("/") else "/"
    return [base + layout.main, base + layout.step_pattern]


def keep_out_of_git(project: pathlib.Path, layout: Layout) -> None:
    """Make a run's files invisible to ``git status`` in ``project`` (see the module)."""
    top = _git(project, "rev-parse", "--show-toplevel")
    exclude = _git(project, "rev-parse", "--path-format=absolute", "--git-path", "info/exclude")
    if top is None or exclude is None:
        return
    ignore = project / ".poli" / ".gitignore"
    if not ignore.exists():
        ignore.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(ignore, POLI_GITIGNORE)
    try:
        relative = project.resolve().relative_to(pathlib.Path(top).resolve()).as_posix()
    except ValueError:
        return
    path = pathlib.Path(exclude)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    have = set(text.splitlines())
    wanted = exclude_patterns("" if relative == "." else relative, layout)
    missing = [p for p in wanted if p not in have]
    if not missing:
        return
    head = "" if _MARK in have else f"{_MARK}\n"
    sep = "" if not text or text.endswith("\n") else "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(sep + head + "".join(f"{p}\n" for p in missing))
