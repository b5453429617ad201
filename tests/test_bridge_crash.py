"""The bridge survives: kill -9 of the daemon mid-edit and mid-agent-turn, and its own errors.

Ground truth is what happened outside the queue: the content of the files the tasks edit,
the lines their commands append to ``runs.txt``, and the prompts the fake agent logged.
Windows are held open by a command that waits for a ``go`` file the test creates, or by an
agent turn that never ends, never by a sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import typing as t

import psutil

from politerm._internal.waits import pid_alive
from politerm.bridge.bridge import Bridge
from politerm.bridge.executor import BuiltinExecutor
from politerm.bridge.queue import TaskQueue, find
from politerm.store import RunStore
from politerm.store.bridge import BridgeJournal
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import retry_until
from tests.test_bridge import archived, cmd_task, poli, submit
from tests.test_bridge_agent import BLOCK, write_project

if t.TYPE_CHECKING:
    import pathlib

QUEUE = ("--queue", "bq/task_queue.json")
# Bounded: a command that waits for the test's go-ahead (at most 30 s), then says it ended.
WAIT_FOR_GO = "for i in $(seq 300); do [ -f go ] && break; sleep 0.1; done"


def held(name: str) -> str:
    return f"echo {name} start >> runs.txt; {WAIT_FOR_GO}; echo {name} end >> runs.txt"


def start_daemon(tmp_path: pathlib.Path, *extra: str) -> int:
    up = poli(tmp_path, "bridge", "start", "--daemon", *QUEUE, *extra)
    assert up.returncode == 0, up.stderr
    return int(up.stdout.split()[1])


def kill_9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    retry_until(lambda: not pid_alive(pid), 30, what=f"bridge {pid} to die")


def stop_daemon(tmp_path: pathlib.Path) -> None:
    down = poli(tmp_path, "bridge", "stop", *QUEUE)
    assert down.returncode == 0, down.stderr


def queued(tmp_path: pathlib.Path, task_id: str) -> dict[str, t.Any] | None:
    return find(TaskQueue(tmp_path / "bq" / "task_queue.json").read(), task_id)


def lines(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_bridge_daemon_killed_mid_edit_task_resumes_without_editing_twice(
    tmp_path: pathlib.Path,
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"a\r\n")
    edit = {
        "task_id": "edit",
        "instruction_details": {
            "file_modifications": [
                {"file_path": "notes.txt", "action": "append_content", "content": "line"}
            ],
            # Runs after the edit (step 0): holds the task between prepare and finalize.
            "commands_to_execute": [{"command_id": "c0", "command": held("c0")}],
        },
    }
    pid = start_daemon(tmp_path)
    try:
        submit(tmp_path, edit)
        runs = tmp_path / "runs.txt"
        retry_until(lambda: "c0 start" in lines(runs), 60, what="the edit task's command")
        kill_9(pid)
        # Killed between prepare and finalize: still handed over, its edit already made.
        raw = queued(tmp_path, "edit")
        assert raw is not None
        assert raw["status"] == "pending_agent_action"
        assert notes.read_bytes() == b"a\r\nline"
        pid = start_daemon(tmp_path)
        (tmp_path / "go").touch()
        done = archived(tmp_path, "processed", "edit")
        retry_until(done.exists, 60, what="the edit task archived as processed")
    finally:
        stop_daemon(tmp_path)
    assert notes.read_bytes() == b"a\r\nline"  # edited once, not twice
    assert lines(runs) == ["c0 start", "c0 end"]
    assert queued(tmp_path, "edit") is None
    log = (done / "task.log").read_text()
    assert log.count("prepared and handed to builtin") == 1
    assert log.count("edits applied") == 1
    assert "resuming a task handed over before a restart" in log
    assert log.count("command c0: runner") == 1  # adopted after the restart, not respawned
    saved = json.loads((done / "task.json").read_text())
    assert saved["status"] == "completed"
    assert saved["result"]["files_changed"] == [str(notes)]


def done_rule(task_id: str, body: str, path: str, content: str) -> str:
    """A fake-agent rule: write ``path``, then report ``done`` for ``task_id``."""
    block = BLOCK.format(kind="done", body=body)
    pattern = f"(?s)BRIDGE TASK (?P<id>{task_id}) \\(nonce (?P<nonce>[0-9a-f]+)\\)"
    return (
        f"[[rules]]\nmatch = '{pattern}'\nreply = '''{block}'''\n"
        f"write_file = {{ path = {json.dumps(path)}, content = {json.dumps(content)} }}\n"
    )


AGENT_SCENARIO = "\n".join(
    [
        done_rule("first", "appended c", "f.txt", "a\nb\nc\n"),
        "[[rules]]\nmatch = 'BRIDGE TASK hung '\naction = \"hang\"\n",  # a turn that never ends
        done_rule("third", "replaced g", "g.txt", "G\n"),
    ]
)


def agent_task(task_id: str, file: str, action: str, content: str) -> dict[str, t.Any]:
    details = {"file_path": file, "action": action, "content": content}
    return {"task_id": task_id, "instruction_details": details}


def test_bridge_daemon_killed_mid_agent_turn_never_delivers_the_task_again(
    tmp_path: pathlib.Path,
) -> None:
    config = write_project(tmp_path, AGENT_SCENARIO)
    (tmp_path / "h.txt").write_text("h\n")
    log = tmp_path / "agent"
    agent = ("--executor", "agent:EDITOR", "--config", str(config))
    pid = start_daemon(tmp_path, *agent)
    try:
        submit(
            tmp_path,
            agent_task("first", "f.txt", "append_content", "c\n"),
            agent_task("hung", "h.txt", "replace_content", "H\n"),
        )
        # The second turn never ends: once its prompt is logged the bridge is mid-turn.
        retry_until(lambda: log.exists() and len(prompts(log)) == 2, 90, what="both prompts")
        assert archived(tmp_path, "processed", "first").exists()
        kill_9(pid)
        raw = queued(tmp_path, "hung")
        assert raw is not None
        assert raw["status"] == "pending_agent_action"
        first_agent = [e["pid"] for e in read_log(log) if e["event"] == "start"]
        # The killed bridge's agent loses its terminal; make sure it is gone for good.
        for p in first_agent:
            if pid_alive(p):
                psutil.Process(p).kill()
        retry_until(lambda: not any(map(pid_alive, first_agent)), 30, what="the first agent to end")
        pid = start_daemon(tmp_path, *agent)
        submit(tmp_path, agent_task("third", "g.txt", "replace_content", "G\n"))
        retry_until(
            lambda: archived(tmp_path, "processed", "third").exists(), 90, what="third archived"
        )
    finally:
        stop_daemon(tmp_path)
    assert archived(tmp_path, "failed", "hung").exists()
    # The agent's own log: each task was delivered exactly once, over both bridges' lives.
    sent = [p.decode().splitlines()[0].split()[2] for p in prompts(log)]
    assert sent == ["first", "hung", "third"]
    assert len([e for e in read_log(log) if e["event"] == "start"]) == 2
    assert (tmp_path / "f.txt").read_text() == "a\nb\nc\n"
    assert (tmp_path / "g.txt").read_text() == "G\n"
    assert (tmp_path / "h.txt").read_text() == "h\n"
    err = json.loads((archived(tmp_path, "failed", "hung") / "error.json").read_text())
    assert err["stage"] == "execution"
    assert "the task is not handed over again" in err["error"]
    assert "the files are not as requested" in err["error"]
    assert TaskQueue(tmp_path / "bq" / "task_queue.json").read() == []


SECRET = "TOPSECRET42"


def test_an_error_inside_the_executor_fails_that_task_and_the_daemon_serves_on(
    tmp_path: pathlib.Path,
) -> None:
    # The queue's folder name is a configured secret: every path in an error must be redacted.
    (tmp_path / "poli.toml").write_text(
        f'[redact]\npatterns = ["{SECRET}"]\n[store]\npath = "{tmp_path / "runs.sqlite3"}"\n'
    )
    root = tmp_path / SECRET
    queue = ("--queue", f"{SECRET}/task_queue.json")
    config = ("--config", str(tmp_path / "poli.toml"))
    blocked = cmd_task("blocked", held("c0"), "echo c1 >> runs.txt")
    up = poli(tmp_path, "bridge", "start", "--daemon", *queue, *config)
    assert up.returncode == 0, up.stderr
    pid = int(up.stdout.split()[1])
    runs = tmp_path / "runs.txt"
    try:
        (tmp_path / "t.json").write_text(
            json.dumps({"tasks": [blocked, cmd_task("after", "true")]})
        )
        assert poli(tmp_path, "bridge", "submit", "t.json", *queue).returncode == 0
        retry_until(lambda: "c0 start" in lines(runs), 60, what="command c0")
        kill_9(pid)
        # While the bridge is dead, c1's runner log cannot be created: a folder is in the way.
        # Resuming, the executor raises IsADirectoryError, which is no task failure it knows.
        (root / "work" / "blocked" / "commands" / "c1.runner.err").mkdir()
        up = poli(tmp_path, "bridge", "start", "--daemon", *queue, *config)
        assert up.returncode == 0, up.stderr
        pid = int(up.stdout.split()[1])
        (tmp_path / "go").touch()
        failed = root / "archive" / "failed" / "blocked"
        retry_until(failed.exists, 60, what="the blocked task archived as failed")
        retry_until((root / "archive" / "processed" / "after").exists, 60, what="the next task")
        assert pid_alive(pid)  # the same daemon goes on serving
    finally:
        down = poli(tmp_path, "bridge", "stop", *queue)
    assert down.stdout.strip() == f"bridge {pid} stopped"
    assert lines(runs) == ["c0 start", "c0 end"]  # c1 never ran
    text = (failed / "error.json").read_text()
    assert SECRET not in text
    error = json.loads(text)
    assert (error["task_id"], error["status"], error["stage"]) == ("blocked", "failed", "execution")
    assert error["error"].startswith("task blocked: execution failed: IsADirectoryError: ")
    assert "[REDACTED:custom]" in error["error"]
    assert "\n" not in error["error"]
    saved = json.loads((failed / "task.json").read_text())
    assert (saved["status"], saved["error"]) == ("failed", error["error"])
    daemon_log = (root / "bridge.log").read_text()
    assert SECRET not in daemon_log
    assert f"blocked: {error['error']}" in daemon_log
    assert "internal error" not in daemon_log
    assert TaskQueue(root / "task_queue.json").read() == []


def test_a_task_whose_finalization_errors_is_set_aside_then_finalized_after_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    queue = TaskQueue(tmp_path / "bq" / "task_queue.json")
    blocker = tmp_path / "bq" / "archive" / "failed"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a folder")  # archiving any failed task raises
    queue.submit([cmd_task("bad", "exit 3"), cmd_task("good", "echo good >> runs.txt")])

    def bridge(store: RunStore) -> Bridge:
        journal = BridgeJournal(store, str(queue.path))
        return Bridge(queue, BuiltinExecutor(), journal, base_dir=tmp_path)

    async def drain(b: Bridge) -> None:
        async with asyncio.timeout(60):  # a bridge looping on "bad" would never return
            await b.drain()

    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        first = bridge(store)
        asyncio.run(drain(first))
        assert dict(first.finalized) == {"good": "completed"}
        assert first.set_aside == {"bad"}
        raw = find(queue.read(), "bad")
        assert raw is not None
        assert raw["status"] == "failed"
        assert raw["error"].startswith(
            "command c0: exited (exit 3); task bad: finalization failed: cannot archive to "
        )
        blocker.unlink()
        restarted = bridge(store)
        asyncio.run(drain(restarted))
    assert dict(restarted.finalized) == {"bad": "failed"}
    assert queue.read() == []
    assert lines(tmp_path / "runs.txt") == ["good"]
    error = json.loads((blocker / "bad" / "error.json").read_text())
    assert (error["stage"], error["error"]) == ("finalization", raw["error"])
