"""Sessions, stores and work queues belong to a project: B's commands never touch A's agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

import psutil

from politerm.config import load_config
from politerm.project import find_project
from politerm.store import RunStore
from politerm.store.db import default_store_path
from politerm.testing.fakeagent.eventlog import read_log
from tests.loophelpers import write_project

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def poli(cwd: pathlib.Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def _project(root: pathlib.Path, socket: str) -> pathlib.Path:
    """A loop project on ``socket`` that leaves session and store to their defaults."""
    path = write_project(root, socket)
    text = path.read_text().replace('session = "t"\n', "").replace('path = "runs.sqlite3"\n', "")
    path.write_text(text)
    return root


def _pids(root: pathlib.Path) -> list[int]:
    return [
        e["pid"]
        for agent in ("planner", "executer")
        for e in read_log(root / f"{agent}.jsonl")
        if e["event"] == "start"
    ]


def _prompts(root: pathlib.Path, agent: str) -> list[str]:
    path = root / f"{agent}.jsonl"
    return [e["text"] for e in read_log(path) if e["event"] == "prompt"] if path.exists() else []


def _alive(pid: int) -> bool:
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_project_b_never_touches_project_a(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    assert server.socket_name is not None
    a = _project(tmp_path / "alpha", server.socket_name)
    b = _project(tmp_path / "beta", server.socket_name)
    a_cfg, b_cfg = load_config(a, env={}), load_config(b, env={})
    assert a_cfg.tmux.session != b_cfg.tmux.session
    assert a_cfg.store.resolved_path() != b_cfg.store.resolved_path()
    for root in (a, b):
        up = poli(root, "up")
        assert up.returncode == 0, up.stdout + up.stderr
    try:
        a_pids = _pids(a)
        # A subdirectory of B is project B (its poli.toml is found upwards).
        (b / "sub").mkdir()
        task = poli(b / "sub", "task", "make hello", "--id", "T-beta")
        assert task.returncode == 0, task.stdout + task.stderr
        assert "final report (T-beta)" in task.stdout
        assert _prompts(b, "executer"), "project B's executer got no prompt"
        assert _prompts(a, "planner") == [] and _prompts(a, "executer") == []
        with RunStore.open(a_cfg.store.resolved_path()) as store:
            assert store.list_tasks() == [], "B's task was queued in A's store"

        listing = json.loads(poli(a, "status", "--all", "--json").stdout)
        by_session = {s["session"]: s for s in listing["sessions"]}
        assert by_session[a_cfg.tmux.session]["project"] == str(a.resolve())
        assert by_session[b_cfg.tmux.session]["project"] == str(b.resolve())
        assert set(by_session[a_cfg.tmux.session]["agents"]) == {"PLANNER", "EXECUTER"}

        down = poli(b, "down")
        assert down.returncode == 0, down.stderr
        sessions = server.cmd("list-sessions", "-F", "#{session_name}").stdout
        assert a_cfg.tmux.session in sessions and b_cfg.tmux.session not in sessions
        assert all(_alive(pid) for pid in a_pids), "B's down killed A's agents"
        # --project selects A from anywhere.
        status = json.loads(poli(tmp_path, "status", "--project", str(a), "--json").stdout)
        assert {x["name"]: x["state"] for x in status["agents"]} == {
            "PLANNER": "ready",
            "EXECUTER": "ready",
        }
    finally:
        poli(a, "down")
        poli(b, "down")


def test_the_project_is_the_poli_toml_dir_else_the_git_root_else_here(
    tmp_path: pathlib.Path, monkeypatch: t.Any
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "app" / "src").mkdir(parents=True)
    monkeypatch.chdir(repo / "app" / "src")
    assert (find_project(env={}).root, find_project(env={}).how) == (repo.resolve(), "git")
    (repo / "app" / "poli.toml").write_text("")
    assert (find_project(env={}).root, find_project(env={}).how) == (
        (repo / "app").resolve(),
        "poli.toml",
    )
    monkeypatch.chdir(tmp_path)
    assert find_project(env={}).root == tmp_path.resolve()
    assert find_project(env={"POLI_PROJECT": str(repo)}).root == repo.resolve()


def _legacy_store(cwd: pathlib.Path) -> pathlib.Path:
    legacy = default_store_path()
    with RunStore.open(legacy) as store:
        store.upsert_agent(
            "PLANNER",
            session="poli",
            pane_id="%1",
            command="claude",
            cwd=str(cwd / "planner"),
            profile="claude",
            resume_command=None,
        )
        store.create_task("T-old", "an old task", max_rounds=3)
    return legacy


def test_the_old_global_store_moves_to_its_project_or_is_named(tmp_path: pathlib.Path) -> None:
    a, b = tmp_path / "alpha", tmp_path / "beta"
    for root in (a, b):
        root.mkdir()
        (root / "poli.toml").write_text("")
    legacy = _legacy_store(a)
    # B is not the old store's project: it is left alone and named, with how to read it.
    out = poli(b, "status", "--json")
    assert out.returncode == 0, out.stderr
    assert "not this project's" in out.stderr and f"poli status --store {legacy}" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert json.loads(out.stdout)["tasks"] == []
    assert legacy.exists()
    # A's agents worked in A: the store moves there, with its history.
    out = poli(a, "status", "--json")
    assert out.returncode == 0, out.stderr
    assert "moved this project's runs" in out.stderr
    assert [tk["id"] for tk in json.loads(out.stdout)["tasks"]] == ["T-old"]
    assert not legacy.exists()
    # Said once: the next command is quiet.
    again = poli(a, "status", "--json")
    assert again.stderr == ""
