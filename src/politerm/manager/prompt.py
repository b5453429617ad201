"""The brain's prompts: the planning prompt, the summarizing prompt, the project overview.

The planning prompt holds, in this order: the project's overall goal, the task's goal, an
overview of the project's files (first call of a task only, bounded), the context summary,
the recent turns, and the latest dev report. Every part is bounded so that a huge report or
repository cannot blow the model's context.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.manager.store import Turn

SYSTEM_PROMPT: t.Final = """\
You are the dev manager of a software project. A Dev Engineer (an AI coding agent) works in \
the project; you plan its next step, read its report, and decide again until the goal is met.

Answer with exactly one of:
- An instruction for the Dev Engineer: one concrete, self-contained step (plain text).
- NEED_USER_INPUT: <question>   when only the human can decide or unblock.
- TASK_COMPLETE <summary>       when the task's goal is met (say how you know).
- SYSTEM_ERROR: <reason>        when the task cannot go on.
A marker counts only at the very start of your answer."""

SUMMARY_SYSTEM_PROMPT: t.Final = """\
You keep the running notes of a dev manager. Merge the earlier summary and the conversation \
turns below into one concise summary: decisions, what was done, what failed, open questions. \
Answer with the summary text only."""

#: Directories the overview never descends into.
SKIP_DIRS: t.Final = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".tox",
        "dist",
        "build",
        "dev_logs",
        "dev_instructions",
        ".poli",
    }
)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds of the prompt's parts (characters, files, lines)."""

    overview_files: int = 200
    readme_lines: int = 40
    readme_chars: int = 4000
    report_chars: int = 12000
    turn_chars: int = 4000


def _bound(text: str, limit: int) -> str:
    r"""Cut ``text`` to ``limit`` characters, saying how much was left out.

    Examples
    --------
    >>> _bound("abcdef", 4)
    'abcd\n[… 2 more characters]'
    >>> _bound("abc", 4)
    'abc'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… {len(text) - limit} more characters]"


def project_overview(root: pathlib.Path, limits: Limits = Limits()) -> str:
    """A bounded overview of the project at ``root``: files with sizes, and the README's head.

    Directories in :data:`SKIP_DIRS` and hidden ones are left out; at most
    ``limits.overview_files`` files are listed (then a count of the rest).
    """
    files: list[str] = []
    extra = 0
    readme: pathlib.Path | None = None
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        here = pathlib.Path(dirpath)
        for name in sorted(filenames):
            path = here / name
            if readme is None and here == root and name.lower().startswith("readme"):
                readme = path
            if len(files) >= limits.overview_files:
                extra += 1
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            files.append(f"{path.relative_to(root).as_posix()} ({size} bytes)")
    lines = [f"Root: {root}", f"Files ({len(files) + extra}):", *(f"- {f}" for f in files)]
    if extra:
        lines.append(f"- … and {extra} more files")
    if readme is not None:
        try:
            with readme.open(encoding="utf-8", errors="replace") as fh:
                head = [
                    line.rstrip("\n")
                    for _, line in zip(range(limits.readme_lines), fh, strict=False)
                ]
        except OSError:
            head = []
        if head:
            lines += ["", f"{readme.name} (first {len(head)} lines):"]
            lines.append(_bound("\n".join(head), limits.readme_chars))
    return "\n".join(lines)


def _label(role: str) -> str:
    return {
        "manager": "Manager → Dev",
        "dev": "Dev report",
        "user": "Human",
        "system": "System",
    }.get(role, role)


def planning_prompt(
    *,
    overall_goal: str,
    task_goal: str,
    overview: str | None,
    summary: str,
    turns: Sequence[Turn],
    latest_report: str | None,
    limits: Limits = Limits(),
) -> str:
    """The prompt of one planning call (the system prompt is :data:`SYSTEM_PROMPT`).

    ``turns`` are the recent turns not yet folded into ``summary``; ``latest_report`` is
    shown on its own (and not repeated among the turns).
    """
    parts = [
        "## Overall goal of the project",
        overall_goal.strip() or "(none given)",
        "",
        "## Current task",
        task_goal.strip(),
    ]
    if overview is not None:
        parts += ["", "## Project overview", overview]
    parts += ["", "## Context summary", summary.strip() or "(nothing summarized yet)"]
    parts += ["", "## Recent conversation"]
    if turns:
        for turn in turns:
            parts.append(f"[{_label(turn.role)}, step {turn.step}]")
            parts.append(_bound(turn.text.strip(), limits.turn_chars))
    else:
        parts.append("(this is the first step of the task)")
    parts += ["", "## Latest dev report"]
    parts.append(
        _bound(latest_report.strip(), limits.report_chars) if latest_report else "(none yet)"
    )
    parts += ["", "Decide the next step now."]
    return "\n".join(parts)


def summary_prompt(*, summary: str, turns: Sequence[Turn], limits: Limits = Limits()) -> str:
    """The prompt that folds ``turns`` into the running ``summary``."""
    parts = ["## Earlier summary", summary.strip() or "(none)", "", "## Turns to fold in"]
    for turn in turns:
        parts.append(f"[{_label(turn.role)}, step {turn.step}]")
        parts.append(_bound(turn.text.strip(), limits.turn_chars))
    return "\n".join(parts)


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token), enough to apply a budget.

    Examples
    --------
    >>> estimate_tokens("x" * 400)
    100
    """
    return (len(text) + 3) // 4
