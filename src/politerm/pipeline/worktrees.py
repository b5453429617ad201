"""Git worktrees for parallel steps (``poli run --worktrees``).

Each step of a parallel group works in its own worktree on its own branch
(``poli/<run id>/step-N``, checked out under ``.poli/worktrees/<run id>/step-N``). When the
step is done its changes are committed there; at the group's sync point the branches are
merged into the project's checkout in step order. A conflict is left in place for a person
to resolve, re-run or skip (the runner turns it into a gate).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess

from politerm._internal.private import private_dir
from politerm.errors import PipelineError
from politerm.pipeline.handoff import CLASSIC, HANDOFF, META_DIR, Layout
from politerm.pipeline.state import poli_dir

# Never committed from a worktree: the handoff files travel outside git.
_UNSTAGE = (
    HANDOFF,
    ".handoff-step-*.md",
    f"{META_DIR}/handoff.md",
    f"{META_DIR}/handoff-step-*.md",
)


def _env(cwd: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    probe = subprocess.run(
        ["git", "config", "user.email"], cwd=cwd, capture_output=True, text=True, check=False
    )
    if not probe.stdout.strip():
        # Commits need an identity; a fresh machine or CI has none configured.
        env.update(
            GIT_AUTHOR_NAME="politerm",
            GIT_AUTHOR_EMAIL="politerm@localhost",
            GIT_COMMITTER_NAME="politerm",
            GIT_COMMITTER_EMAIL="politerm@localhost",
        )
    return env


def git(cwd: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git in ``cwd``; raise :class:`PipelineError` with its output when it fails."""
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=_env(cwd), check=False
    )
    if check and proc.returncode != 0:
        out = (proc.stderr or proc.stdout).strip().splitlines()
        msg = f"git {args[0]} failed in {cwd}: {out[-1] if out else 'no output'}"
        raise PipelineError(msg)
    return proc


def require_repo(project: pathlib.Path) -> None:
    """Fail unless ``project`` is a git checkout with at least one commit."""
    if git(project, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        msg = f"--worktrees needs a git repository with a commit in {project}"
        raise PipelineError(msg)


def branch(run_id: str, num: int) -> str:
    """The branch of a parallel step.

    Examples
    --------
    >>> branch("20250101T000000Z-ab12", 3)
    'poli/20250101T000000Z-ab12/step-3'
    """
    return f"poli/{run_id}/step-{num}"


def path_of(project: pathlib.Path, run_id: str, num: int) -> pathlib.Path:
    """Where the worktree of a step is checked out."""
    return poli_dir(project) / "worktrees" / run_id / f"step-{num}"


def create(project: pathlib.Path, run_id: str, num: int, layout: Layout = CLASSIC) -> pathlib.Path:
    """A fresh worktree and branch for step ``num`` from the project's HEAD.

    A worktree left by an earlier attempt is removed first. The project's ``.handoff.md``
    (not committed) is copied in so the step can read it.
    """
    where = path_of(project, run_id, num)
    remove(project, run_id, num)
    private_dir(where.parent)
    git(project, "worktree", "add", "-q", "-b", branch(run_id, num), str(where), "HEAD")
    src = project / layout.main
    if src.exists():
        (where / layout.main).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, where / layout.main)
    return where


def commit(worktree: pathlib.Path, num: int, agent: str) -> bool:
    """Commit what step ``num`` changed in its worktree; False when it changed nothing."""
    git(worktree, "add", "-A")
    git(worktree, "reset", "-q", "--", *_UNSTAGE, check=False)
    if git(worktree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return False
    git(worktree, "commit", "-q", "-m", f"poli: step {num} ({agent})")
    return True


@dataclasses.dataclass(frozen=True)
class MergeResult:
    """How merging one step's branch went."""

    num: int
    merged: bool
    conflicts: tuple[str, ...] = ()


def merge(project: pathlib.Path, run_id: str, num: int) -> MergeResult:
    """Merge step ``num``'s branch into the project's checkout.

    On a conflict the merge is left in progress (conflict markers in the files) and the
    conflicting paths are returned.
    """
    name = branch(run_id, num)
    proc = git(project, "merge", "--no-ff", "--no-edit", "-m", f"poli: merge {name}", name,
               check=False)  # fmt: skip
    if proc.returncode == 0:
        return MergeResult(num, merged=True)
    files = git(project, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
    if not files:
        out = (proc.stderr or proc.stdout).strip().splitlines()
        msg = f"git merge {name} failed: {out[-1] if out else 'no output'}"
        raise PipelineError(msg)
    return MergeResult(num, merged=False, conflicts=tuple(files))


def merge_in_progress(project: pathlib.Path) -> bool:
    """Whether the project's checkout is in the middle of a merge."""
    return git(project, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode == 0


def unmerged(project: pathlib.Path) -> list[str]:
    """Paths still in conflict."""
    return git(project, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()


def conclude(project: pathlib.Path) -> None:
    """Commit a merge a person resolved (they may also have committed it themselves)."""
    if merge_in_progress(project):
        git(project, "commit", "-q", "--no-edit")


def abort_merge(project: pathlib.Path) -> None:
    """Back out of a merge in progress."""
    if merge_in_progress(project):
        git(project, "merge", "--abort")


def remove(project: pathlib.Path, run_id: str, num: int, *, keep_branch: bool = False) -> None:
    """Remove a step's worktree and (unless ``keep_branch``) its branch, if they exist."""
    where = path_of(project, run_id, num)
    if where.exists():
        git(project, "worktree", "remove", "--force", str(where), check=False)
        shutil.rmtree(where, ignore_errors=True)
    git(project, "worktree", "prune", check=False)
    if not keep_branch:
        git(project, "branch", "-q", "-D", branch(run_id, num), check=False)


def remove_all(project: pathlib.Path, run_id: str) -> None:
    """Remove every worktree of a run (branches are kept for a person to look at)."""
    base = poli_dir(project) / "worktrees" / run_id
    if base.is_dir():
        for child in base.iterdir():
            if child.name.startswith("step-") and child.name[5:].isdigit():
                remove(project, run_id, int(child.name[5:]), keep_branch=True)
        shutil.rmtree(base, ignore_errors=True)
