"""A run's files stay out of the user's git status: .poli/.gitignore and info/exclude."""

from __future__ import annotations

import subprocess
import typing as t

from politerm.pipeline.gitignore import keep_out_of_git
from politerm.pipeline.handoff import Layout

if t.TYPE_CHECKING:
    import pathlib


def git(cwd: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def test_run_files_are_ignored_and_the_users_definitions_are_not(tmp_path: pathlib.Path) -> None:
    git(tmp_path, "init", "-q")
    project = tmp_path / "app"  # a project in a subfolder of the repository
    for rel in (
        ".poli/pipelines/mine.pipeline",
        ".poli/agents/scout.md",
        ".poli/steps/R1/step-1.a1.jsonl",
        ".poli/state.R1",
        ".poli/worktrees/R1/step-2/x.txt",
        ".handoff.md",
        ".handoff-step-3.md",
        ".meta/handoff.md",
        ".meta/handoff-step-2.md",
        ".meta/keep.md",
        "src/app.py",
    ):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text("x\n")
    keep_out_of_git(project, Layout())
    keep_out_of_git(project, Layout(".meta"))
    keep_out_of_git(project, Layout(".meta"))  # once is enough: nothing is added twice
    status = sorted(
        line[3:] for line in git(tmp_path, "status", "--porcelain", "-uall").splitlines()
    )
    assert status == [
        "app/.meta/keep.md",
        "app/.poli/agents/scout.md",
        "app/.poli/pipelines/mine.pipeline",
        "app/src/app.py",
    ]
    exclude = (tmp_path / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/app/.handoff.md\n") == 1
    assert exclude.count("/app/.meta/handoff-step-*.md\n") == 1
    assert (project / ".poli" / ".gitignore").stat().st_mode & 0o777 == 0o600


def test_outside_git_nothing_is_written(tmp_path: pathlib.Path) -> None:
    keep_out_of_git(tmp_path, Layout())
    assert not (tmp_path / ".poli").exists()
