"""The project's router service: routing goes on whether or not a ``poli task`` runs (issue 21).

Every command runs as the real ``poli`` in a subprocess on real tmux with the fake agents;
ground truth is each fake agent's own log (what it was really given and answered).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import typing as t

import ptyprocess
import pytest

from politerm.agents.bundled import FAKE_AGENT_MODULE
from politerm.engine import service
from politerm.engine.service import ServiceLock
from politerm.store.models import TaskState
from politerm.testing.retry import WaitTimeout, retry_until
from tests.loophelpers import (
    EXECUTER_OK,
    FINAL,
    PLAN,
    PLANNER_HEAD,
    PLANNER_OK,
    block,
    open_loop,
    rule,
    write_project,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from tests.loophelpers import Loop

pytestmark = pytest.mark.timeout(300)

SLOW_EXECUTER = EXECUTER_OK.replace("think_time = 0.3", "think_time = 2.0")


def poli(cwd: pathlib.Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def start(cwd: pathlib.Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"},
    )


def _project(
    server: libtmux.Server,
    root: pathlib.Path,
    *,
    planner: str = PLANNER_OK,
    executer: str = EXECUTER_OK,
) -> Loop:
    assert server.socket_name is not None
    write_project(root, server.socket_name, planner=planner, executer=executer)
    up = poli(root, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    return open_loop(root)


def _prompts(loop: Loop, agent: str, head: str) -> list[str]:
    return [p for p in loop.prompts(agent) if p.startswith(head)]


def _state(loop: Loop, task_id: str) -> TaskState | None:
    task = loop.store.get_task(task_id)
    return task.state if task else None


def _down(loop: Loop) -> None:
    loop.store.close()
    poli(loop.root, "down")


def test_two_blocking_tasks_started_together_both_finish(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    loop = _project(server, tmp_path)
    try:
        procs = [start(tmp_path, "task", f"make hello {n}", "--id", f"T-{n}") for n in (1, 2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        for n, (proc, out) in enumerate(zip(procs, outs, strict=True), start=1):
            assert proc.returncode == 0, out
            assert f"final report (T-{n})" in out
            # Each task's prompt reached the planner once, and its plan the executer once.
            assert len(_prompts(loop, "PLANNER", f"TASK_ID=T-{n}\n")) == 1
        assert len(loop.prompts("EXECUTER")) == 2
        # An ended task is not aborted again: refused in one line, the task stays done.
        refused = poli(tmp_path, "abort", "T-1")
        assert refused.returncode == 1
        assert refused.stderr == "poli: task T-1 is already done; there is nothing to abort\n"
        assert _state(loop, "T-1") is TaskState.DONE
        # The service ends with its session (here the whole tmux server), idle or not.
        lock = ServiceLock.of(loop.config)
        assert lock.read() is not None
        server.kill()
        retry_until(lambda: lock.read() is None, 60, what="the service to end with its session")
    finally:
        _down(loop)


def test_an_answer_after_poli_task_exited_is_delivered_at_once(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    question = block("USER", "question", "Which greeting should I use?", tag="QUESTION")
    planner = (
        PLANNER_HEAD
        + rule(r"\A\s*EXECUTER replied:", FINAL)
        + rule(r"\AThe user answered", PLAN)
        + rule(r"\A(?=TASK_ID=)", question)
    )
    loop = _project(server, tmp_path, planner=planner)
    try:
        asked = poli(tmp_path, "task", "ask me", "--id", "T-q")
        assert asked.returncode == 3, asked.stdout + asked.stderr
        assert "poli answer T-q" in asked.stdout
        answered = poli(tmp_path, "answer", "T-q", "Use 'hello'.")
        assert answered.returncode == 0, answered.stderr
        # Nobody runs `poli route`: the project's service delivers it and routes on.
        retry_until(lambda: _state(loop, "T-q") is TaskState.DONE, 60, what="T-q to be done")
        assert len(_prompts(loop, "PLANNER", "The user answered your question:\nUse")) == 1
        assert len(loop.prompts("EXECUTER")) == 1
    finally:
        _down(loop)


def test_ctrl_c_in_poli_task_detaches_and_the_task_goes_on(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    loop = _project(server, tmp_path, executer=SLOW_EXECUTER)
    proc = ptyprocess.PtyProcess.spawn(
        [sys.executable, "-m", "politerm", "task", "make hello", "--id", "T-c"],
        cwd=str(tmp_path),
        env={**os.environ, "COLUMNS": "200"},
        dimensions=(50, 200),
        # A user's terminal: Ctrl-C reaches it even when this suite was started in the
        # background (a shell's `&` leaves SIGINT ignored, and that is inherited).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out = b""
    try:
        retry_until(lambda: loop.prompts("EXECUTER"), 60, what="the executer to get its plan")
        proc.write(b"\x03")  # the terminal's Ctrl-C: SIGINT to its foreground group
        while True:
            try:
                out += proc.read(4096)
            except EOFError:
                break
        proc.wait()
        text = out.decode(errors="replace")
        assert proc.exitstatus == 130, text
        assert "detached from T-c; it goes on" in text
        assert "poli task --follow T-c" in text and "poli abort T-c" in text
        retry_until(lambda: _state(loop, "T-c") is TaskState.DONE, 60, what="T-c to be done")
        assert len(loop.prompts("EXECUTER")) == 1
        assert len(_prompts(loop, "PLANNER", "TASK_ID=T-c\n")) == 1
        followed = poli(tmp_path, "task", "--follow", "T-c")
        assert followed.returncode == 0 and "final report (T-c)" in followed.stdout
    finally:
        if proc.isalive():
            proc.kill(signal.SIGKILL)
        _down(loop)


def test_a_stranded_delivery_is_retried_until_dead_lettered_within_its_deadline(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    stuck = EXECUTER_OK.replace("think_time = 0.3", "think_time = 0.3\nswallow_all_enters = true")
    loop = _project(server, tmp_path, executer=stuck)
    try:
        # The step's deadline (exec = 20 s) never starts: the plan is never delivered.
        run = poli(tmp_path, "task", "make hello", "--id", "T-s", "--timeout", "90")
        assert run.returncode == 1, run.stdout + run.stderr
        task = loop.store.get_task("T-s")
        assert task is not None and task.state is TaskState.FAILED
        assert task.error is not None and "could not deliver the plan message" in task.error
        swallowed = [e for e in loop.log("EXECUTER") if e["event"] == "swallowed_enter"]
        assert len(swallowed) >= loop.config.routing.max_attempts
        assert not loop.replies("EXECUTER")
    finally:
        _down(loop)


def test_the_service_killed_mid_delivery_is_restarted_and_loses_nothing(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    loop = _project(server, tmp_path, executer=SLOW_EXECUTER)
    lock = ServiceLock.of(loop.config)
    try:
        first = lock.read()
        assert first is not None and first.router is not None
        queued = poli(tmp_path, "task", "make hello", "--id", "T-k", "--no-wait")
        assert queued.returncode == 0, queued.stderr
        retry_until(lambda: loop.prompts("EXECUTER"), 60, what="the executer to get its plan")
        os.kill(first.router, signal.SIGKILL)

        def restarted() -> bool:
            info = lock.read()
            return info is not None and info.router not in (None, first.router)

        log = service.log_path(loop.config)
        try:
            retry_until(restarted, 30, what="the supervisor to start a new router")
        except WaitTimeout as exc:  # the service's own word on why (CI saw this once)
            said = log.read_text() if log.exists() else "(no service log)"
            msg = f"{exc}; lock {lock.read()}; service log:\n{said}"
            raise AssertionError(msg) from None
        retry_until(lambda: _state(loop, "T-k") is TaskState.DONE, 60, what="T-k to be done")
        # Nothing lost, nothing twice: one task prompt, one plan, one result.
        assert len(_prompts(loop, "PLANNER", "TASK_ID=T-k\n")) == 1
        assert len(loop.prompts("EXECUTER")) == 1
        assert len(loop.prompts("PLANNER")) == 2
        status = json.loads(poli(tmp_path, "status", "--json").stdout)
        assert status["router"]["pid"] == first.pid and status["router"]["restarts"] == 1
    finally:
        _down(loop)
    assert lock.read() is None and not lock.path.exists()  # poli down stopped it


def test_a_loop_prompt_and_a_message_to_one_idle_agent_are_typed_one_after_the_other(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    """The service types both through PLANNER's one driver: each once, never into the other."""
    loop = _project(server, tmp_path)
    try:
        procs = [
            start(tmp_path, "task", "make hello", "--id", "T-m", "--no-wait"),
            start(tmp_path, "send", "--to", "PLANNER", "a note for the planner"),
        ]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        msg_id = outs[1].splitlines()[0]
        retry_until(lambda: _state(loop, "T-m") is TaskState.DONE, 60, what="T-m to be done")

        def delivered() -> bool:
            shown = json.loads(poli(tmp_path, "msg", "show", msg_id, "--json").stdout)
            return bool(shown["state"] == "delivered")

        retry_until(delivered, 60, what=f"{msg_id} to be delivered")
        typed = [e for e in loop.log("PLANNER") if e["event"] == "prompt"]
        texts = [e["text"] for e in typed]
        # The task's prompt, the message and the executer's result: each whole, each once,
        # and none typed while PLANNER was busy with another (the fake agent queues those).
        assert len(texts) == 3, texts
        assert len([x for x in texts if x.startswith("TASK_ID=T-m\n")]) == 1
        assert len([x for x in texts if f"Message {msg_id} " in x]) == 1
        assert len([x for x in texts if x.lstrip().startswith("EXECUTER replied:")]) == 1
        assert [e["queued"] for e in typed] == [False, False, False]
    finally:
        _down(loop)


def test_a_router_lock_of_a_dead_router_is_taken_over(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    write_project(tmp_path, server.socket_name, planner=PLANNER_OK)
    failed = poli(tmp_path, "route", "--until-idle")  # no session: it fails
    assert failed.returncode == 1
    loop = open_loop(tmp_path)
    from politerm.engine.loop import router_lock

    lock = router_lock(loop.config)
    assert lock.holder() is None  # no dead pid left behind
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.path.write_text(f"{dead.pid}\n")
    assert lock.holder() is None
    up = poli(tmp_path, "up", "--no-route")
    assert up.returncode == 0, up.stderr
    try:
        routed = poli(tmp_path, "task", "make hello", "--id", "T-l")
        assert routed.returncode == 0, routed.stdout + routed.stderr
    finally:
        _down(loop)


def _manager_project(server: libtmux.Server, root: pathlib.Path) -> None:
    assert server.socket_name is not None

    def fake(scenario: str) -> str:
        argv = [sys.executable, "-m", FAKE_AGENT_MODULE, "--mode", "claude"]
        return json.dumps([*argv, "--scenario", scenario])

    (root / "proj").mkdir(parents=True)
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\nsession = "t"\n\n'
        '[store]\npath = "runs.sqlite3"\n\n'
        '[manager]\ndev_agent = "fake-claude"\nstep_timeout = 60\n'
        f"dev_command = {fake('manager-dev')}\n\n"
        '[manager.brain]\nprovider = "agent"\nagent = "fake-claude"\ncall_timeout = 60\n'
        f"command = {fake('manager-brain')}\n"
    )
    added = poli(root, "manager", "project", "add", "demo", str(root / "proj"), "--channel", "pane")
    assert added.returncode == 0, added.stderr


def _manager_sessions(server: libtmux.Server) -> list[str]:
    return [s.name or "" for s in server.sessions if "-mgr-" in (s.name or "")]


def test_manager_agents_end_with_their_goal_or_with_poli_down(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    _manager_project(server, tmp_path)
    goal = poli(tmp_path, "manager", "goal", "--project", "demo", "Make hello.py with a test")
    assert goal.returncode == 0, goal.stderr
    assert "(t-mgr-demo)" in goal.stderr and "(t-mgr-brain)" in goal.stderr, goal.stderr
    assert _manager_sessions(server) == []  # the brain and the dev agent went with the goal
    kept = poli(
        tmp_path, "manager", "goal", "--project", "demo", "Make hello.py again", "--keep-agents"
    )
    assert kept.returncode == 0, kept.stderr
    assert sorted(_manager_sessions(server)) == ["t-mgr-brain", "t-mgr-demo"]
    down = poli(tmp_path, "down")
    assert down.returncode == 0, down.stderr
    assert "(t-mgr-demo)" in down.stdout and "(t-mgr-brain)" in down.stdout, down.stdout
    assert "nothing was running" not in down.stdout
    assert _manager_sessions(server) == []
