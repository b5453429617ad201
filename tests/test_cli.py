"""The poli command line as a user runs it: real processes, real tmux, real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

import psutil

from politerm.testing.retry import retry_until
from tests.loophelpers import EXECUTER_OK, open_loop, write_project

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def poli(cwd: pathlib.Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_status_json_on_an_empty_store(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "s.sqlite3"\n')
    out = poli(tmp_path, "status", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"agents", "tasks", "messages", "events"} <= set(data)
    assert (tmp_path / "s.sqlite3").stat().st_mode & 0o777 == 0o600


def test_bad_config_is_one_line_naming_file_key_and_expected(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[timeouts]\nplan = "soon"\n')
    out = poli(tmp_path, "status")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "poli.toml" in lines[0] and "timeouts.plan" in lines[0] and "seconds" in lines[0]
    assert "Traceback" not in out.stderr


def test_up_task_status_down(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    assert server.socket_name is not None
    slow = EXECUTER_OK.replace('mode = "codex"', 'mode = "codex"\nspawn_child = true')
    write_project(tmp_path, server.socket_name, executer=slow)
    up = poli(tmp_path, "up")
    assert up.returncode == 0, up.stderr + up.stdout
    again = poli(tmp_path, "up")
    assert again.returncode == 1 and "already up" in again.stderr

    def control_window() -> str:
        return "\n".join(server.cmd("capture-pane", "-p", "-t", "=t:control").stdout)

    # Window 0 shows this project's live status (its store, not the default one).
    retry_until(lambda: "EXECUTER" in control_window(), 15, what="the control window's status")
    task = poli(tmp_path, "task", "make hello", "--id", "T-cli")
    assert task.returncode == 0, task.stderr + task.stdout
    assert "final report (T-cli)" in task.stdout
    for hop in ("PLANNER → EXECUTER: plan", "EXECUTER → PLANNER: result", "PLANNER → USER: final"):
        assert hop in task.stdout
    status = json.loads(poli(tmp_path, "status", "--json").stdout)
    assert {a["name"]: a["state"] for a in status["agents"]} == {
        "PLANNER": "ready",
        "EXECUTER": "ready",
    }
    assert status["tasks"][-1]["state"] == "done"
    loop = open_loop(tmp_path)
    pids = [
        pid
        for agent in ("PLANNER", "EXECUTER")
        for e in loop.log(agent)
        if e["event"] == "start"
        for pid in (e["pid"], e.get("child_pid"))
        if pid
    ]
    loop.store.close()
    assert len(pids) == 3  # two agents and the executer's child
    down = poli(tmp_path, "down")
    assert down.returncode == 0, down.stderr
    assert "PLANNER" in down.stdout and "EXECUTER" in down.stdout

    def gone() -> bool:
        return not any(
            psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids
        )

    retry_until(gone, 60, what="every agent process to be gone")
    status = json.loads(poli(tmp_path, "status", "--json").stdout)
    assert {a["state"] for a in status["agents"]} == {"exited"}


def test_abort_interrupts_the_working_agent(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    assert server.socket_name is not None
    hang = EXECUTER_OK.replace("think_time = 0.3", "think_time = 30")
    write_project(tmp_path, server.socket_name, executer=hang)
    assert poli(tmp_path, "up").returncode == 0
    router = subprocess.Popen(
        [sys.executable, "-m", "politerm", "task", "slow one", "--id", "T-abort"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        loop = open_loop(tmp_path)
        retry_until(lambda: loop.prompts("EXECUTER"), 30, what="the executer to get its plan")
        out = poli(tmp_path, "abort", "T-abort")
        assert out.returncode == 0, out.stderr
        assert router.wait(30) == 1  # the task command reports the abort
        task = loop.store.get_task("T-abort")
        assert task is not None and task.state.value == "aborted"
        retry_until(
            lambda: any(e["event"] == "interrupt" for e in loop.log("EXECUTER")),
            10,
            what="the executer to be interrupted",
        )
        loop.store.close()
    finally:
        router.kill()
        poli(tmp_path, "down")


def test_an_agent_given_only_a_profile_starts_that_profiles_program(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # Issue 23: `profile = "fake"` with no command kept the built-in fake agent in codex mode
    # and `poli up` failed after 60 s (not ready … unknown); `profile = "fake-plain"` said
    # `command: missing`. Each agent here has a profile and nothing else.
    agents = '[agents.PLANNER]\nprofile = "fake-plain"\n\n[agents.EXECUTER]\nprofile = "fake"\n'
    tmux = f'[tmux]\nsocket = "{server.socket_name}"\nsession = "p"\n\n'
    store = '[store]\npath = "runs.sqlite3"\n\n[timeouts]\nready = 30\n\n'
    (tmp_path / "poli.toml").write_text(tmux + store + agents)
    up = poli(tmp_path, "up", timeout=90)
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        status = json.loads(poli(tmp_path, "status", "--json").stdout)
        rows = {a["name"]: a for a in status["agents"]}
        assert {n: rows[n]["profile"] for n in ("PLANNER", "EXECUTER")} == {
            "PLANNER": "fake-plain",
            "EXECUTER": "fake",
        }, rows
        assert {rows[n]["state"] for n in ("PLANNER", "EXECUTER")} <= {"ready", "idle"}, rows
        # the profiles' own programs, in their own modes, run in the panes
        for name, mode in (("PLANNER", "plain"), ("EXECUTER", "claude")):
            command = rows[name]["command"]
            assert "politerm.testing.fakeagent" in command, command
            assert f"--mode {mode}" in command, command
    finally:
        down = poli(tmp_path, "down")
        assert down.returncode == 0, down.stderr
