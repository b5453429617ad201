"""A pipeline step's approval question: answered by the run's policy, or by `poli approve`."""

from __future__ import annotations

import typing as t

from politerm.agents.approval import get_pending
from politerm.store import RunStore
from politerm.testing.retry import retry_until
from tests.test_pipeline_run import RUN, events, finish, make_project, output, poli, start

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

STEP = "1 | developer | - | auto | - | - | Run it FAKE:approve\n"


def _with_policy(root: pathlib.Path, mode: str) -> None:
    toml = root / "poli.toml"
    toml.write_text(toml.read_text() + f'\n[routing]\napproval = "{mode}"\n')


def test_step_approval_answered_by_policy(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    root = make_project(tmp_path, server, STEP)
    _with_policy(root, "approve")
    proc = start(root)
    assert finish(proc, root) == 0, output(root)
    assert (root / "approved.txt").read_text() == "approved by step 1\n"
    [answer] = [e for e in events(root, 1) if e["event"] == "approval"]
    assert answer["approved"] is True
    with RunStore.open(root / "runs.sqlite3") as store:
        [event] = [e for e in store.list_events(limit=500) if e.kind == "approval"]
    assert event.data["by"] == "policy" and event.agent == f"{RUN}.step-1"


def test_step_approval_answered_with_poli_approve(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(tmp_path, server, STEP)
    _with_policy(root, "ask")
    proc = start(root)
    try:

        def asked() -> bool:
            with RunStore.open(root / "runs.sqlite3") as store:
                return get_pending(store, f"{RUN}.step-1") is not None

        retry_until(asked, 60, interval=0.1, what="the step's approval question to be pending")
        assert not (root / "approved.txt").exists()
        done = poli(root, "approve", f"{RUN.lower()}.STEP-1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            f"approved: {RUN}.step-1 may run Bash(echo approved > approved.txt)"
        )
    except BaseException:
        proc.kill()
        raise
    assert finish(proc, root) == 0, output(root)
    assert (root / "approved.txt").read_text() == "approved by step 1\n"
    with RunStore.open(root / "runs.sqlite3") as store:
        [event] = [e for e in store.list_events(limit=500) if e.kind == "approval"]
        assert event.data["by"] == "user"
        assert get_pending(store, f"{RUN}.step-1") is None
