"""The bridge end to end: prepare, hand over, run, verify, archive, prune; daemon; kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import typing as t

import pytest

from politerm.bridge.bridge import Bridge
from politerm.bridge.executor import BuiltinExecutor
from politerm.bridge.queue import TaskQueue, find
from politerm.bridge.report import report_task
from politerm.store import RunStore
from politerm.store.bridge import BridgeJournal
from politerm.testing.retry import aretry_until, retry_until

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Iterator

SECRET = "sk-proj-" + "s" * 40


def poli(cwd: pathlib.Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cmd_task(task_id: str, *commands: str, **kw: t.Any) -> dict[str, t.Any]:
    return {
        "task_id": task_id,
        "instruction_details": {
            "commands_to_execute": [
                {"command_id": f"c{i}", "command": c, **kw} for i, c in enumerate(commands)
            ]
        },
    }


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[RunStore]:
    with RunStore.open(tmp_path / "runs.sqlite3") as s:
        yield s


def make_bridge(tmp_path: pathlib.Path, store: RunStore) -> Bridge:
    queue = TaskQueue(tmp_path / "bq" / "task_queue.json")
    journal = BridgeJournal(store, str(queue.path))
    return Bridge(queue, BuiltinExecutor(), journal, base_dir=tmp_path)


def archived(tmp_path: pathlib.Path, kind: str, task_id: str) -> pathlib.Path:
    return tmp_path / "bq" / "archive" / kind / task_id


def test_builtin_executor_runs_edits_and_commands_then_archives_and_prunes(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    (tmp_path / "code.py").write_bytes(b"import os\r\n\r\ndef main():\r\n    pass\r\n")
    bridge = make_bridge(tmp_path, store)
    bridge.queue.submit(
        [
            {
                "task_id": "edit",
                "instruction_details": {
                    "file_path": "code.py",
                    "action": "insert_after_line",
                    "line_marker": "import os",
                    "content": "import sys",
                },
            },
            cmd_task("ok", f"echo token {SECRET}", "echo two > two.txt"),
            cmd_task("bad", "echo failing >&2; exit 3", "echo never > never.txt"),
            {"task_id": "empty", "instruction_details": {}},
        ]
    )
    asyncio.run(bridge.drain())
    assert bridge.queue.read() == []
    assert dict(bridge.finalized) == {
        "edit": "completed",
        "ok": "completed",
        "bad": "failed",
        "empty": "failed",
    }
    assert (tmp_path / "code.py").read_bytes() == (
        b"import os\r\nimport sys\r\n\r\ndef main():\r\n    pass\r\n"
    )
    assert (tmp_path / "two.txt").read_text() == "two\n"
    assert not (tmp_path / "never.txt").exists()

    ok = archived(tmp_path, "processed", "ok")
    saved = json.loads((ok / "task.json").read_text())
    assert saved["status"] == "completed"
    assert saved["agent_action_details"]["tool_to_call"] == "execute_commands_sequentially"
    assert [c["state"] for c in saved["result"]["commands"]] == ["exited", "exited"]
    assert (ok / "commands" / "c0.stdout.log").read_text().startswith("token [REDACTED")
    assert "prepared and handed to builtin" in (ok / "task.log").read_text()
    assert not list((ok / "commands").glob("*.spec.json"))

    bad = archived(tmp_path, "failed", "bad")
    error = json.loads((bad / "error.json").read_text())
    assert error["error"] == "command c0: exited (exit 3)"
    assert (bad / "commands" / "c0.stderr.log").read_text() == "failing\n"
    assert not (bad / "commands" / "c1.status.json").exists()
    empty = json.loads((archived(tmp_path, "failed", "empty") / "error.json").read_text())
    assert empty["stage"] == "validation"
    assert "empty instructions" in empty["error"]

    everything = [p for p in (tmp_path / "bq").rglob("*")]
    for p in everything:
        if p.is_file():
            assert SECRET not in p.read_text(errors="replace"), p
            assert p.stat().st_mode & 0o777 == 0o600, p
        else:
            assert p.stat().st_mode & 0o777 == 0o700, p
    assert not (tmp_path / "bq" / "work" / "ok").exists()
    assert bridge.journal.steps("ok") == []


def test_a_task_handed_to_another_executor_waits_for_its_report_then_is_verified(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    (tmp_path / "f.txt").write_text("a\nb\n")
    bridge = make_bridge(tmp_path, store)
    edit = {
        "file_path": "f.txt",
        "action": "delete_lines",
        "start_line_number": 1,
        "end_line_number": 1,
    }
    bridge.queue.submit(
        [
            {"task_id": "good", "instruction_details": edit},
            {"task_id": "lying", "instruction_details": edit},
        ]
    )
    with bridge.queue.update() as tasks:
        for raw in tasks:
            raw["status"] = "pending"
    # Prepare both for an outside agent: the bridge then leaves them alone.
    other = Bridge(bridge.queue, _Elsewhere(), bridge.journal, base_dir=tmp_path)
    assert other._prepare("good")
    assert other._prepare("lying")
    assert not asyncio.run(bridge.step())
    assert {x["status"] for x in bridge.queue.read()} == {"pending_agent_action"}
    # The agent did the work for one, and claims it for both.
    (tmp_path / "f.txt").write_text("b\n")
    report_task(bridge.queue, "good", "completed_by_agent", message="deleted line 1")
    asyncio.run(bridge.drain())
    (tmp_path / "f.txt").write_text("a\nb\n")  # someone undid it
    report_task(bridge.queue, "lying", "completed_by_agent")
    asyncio.run(bridge.drain())
    assert dict(bridge.finalized) == {"good": "completed", "lying": "failed"}
    err = json.loads((archived(tmp_path, "failed", "lying") / "error.json").read_text())
    assert "does not have the requested content" in err["error"]


class _Elsewhere(BuiltinExecutor):
    name = "agent:elsewhere"


def test_unknown_status_and_unreadable_handed_task_are_failed_not_dropped(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    bridge = make_bridge(tmp_path, store)
    bridge.queue.submit([cmd_task("weird", "true"), cmd_task("broken", "true")])
    with bridge.queue.update() as tasks:
        tasks[0]["status"] = "exploded"
        tasks[1]["status"] = "pending_agent_action"
        tasks[1]["agent_action_details"] = {"executor": "builtin", "tool_to_call": "nope"}
    asyncio.run(bridge.drain())
    assert dict(bridge.finalized) == {"weird": "failed", "broken": "failed"}
    weird = json.loads((archived(tmp_path, "failed", "weird") / "error.json").read_text())
    assert "unknown status 'exploded'" in weird["error"]


def start_foreground(tmp_path: pathlib.Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "politerm", "bridge", "start", "--queue", "bq/task_queue.json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def submit(tmp_path: pathlib.Path, *tasks: dict[str, t.Any]) -> None:
    (tmp_path / "t.json").write_text(json.dumps({"tasks": list(tasks)}))
    done = poli(tmp_path, "bridge", "submit", "t.json", "--queue", "bq/task_queue.json")
    assert done.returncode == 0, done.stderr


def test_daemon_wakes_on_submit_and_stops_on_request(tmp_path: pathlib.Path) -> None:
    up = poli(tmp_path, "bridge", "start", "--daemon", "--queue", "bq/task_queue.json")
    assert up.returncode == 0, up.stderr
    pid = int(up.stdout.split()[1])
    pidfile = tmp_path / "bq" / "bridge.pid"
    try:
        # In the background: `poli bridge start --daemon` has returned, its bridge serves on.
        assert pidfile.read_text() == f"{pid}\n"
        assert pidfile.stat().st_mode & 0o777 == 0o600
        assert os.getsid(pid) == pid  # its own session: detached from the caller's terminal
        again = poli(tmp_path, "bridge", "start", "--daemon", "--queue", "bq/task_queue.json")
        assert again.returncode == 1
        assert f"a bridge already serves {tmp_path / 'bq' / 'task_queue.json'}" in again.stderr
        submit(tmp_path, cmd_task("one", "echo hi > hi.txt"))
        assert retry_until(lambda: archived(tmp_path, "processed", "one").exists(), 60)
        listed = poli(tmp_path, "bridge", "list", "--json", "--queue", "bq/task_queue.json")
        assert json.loads(listed.stdout) == []
        shown = poli(tmp_path, "bridge", "show", "one", "--queue", "bq/task_queue.json")
        assert '"status": "completed"' in shown.stdout
        assert "--- task.log" in shown.stdout
    finally:
        down = poli(tmp_path, "bridge", "stop", "--queue", "bq/task_queue.json")
    assert down.returncode == 0, down.stderr
    assert down.stdout.strip() == f"bridge {pid} stopped"
    assert not pidfile.exists()
    log = (tmp_path / "bq" / "bridge.log").read_text()
    assert "serving" in log
    assert "bridge stopped" in log
    assert poli(tmp_path, "bridge", "stop", "--queue", "bq/task_queue.json").stdout.startswith(
        "no bridge serves"
    )


def test_bridge_killed_mid_command_resumes_and_runs_it_exactly_once(
    tmp_path: pathlib.Path,
) -> None:
    script = "echo start >> runs.txt; sleep 2; echo end >> runs.txt; echo done"
    bridge = start_foreground(tmp_path)
    try:
        submit(tmp_path, cmd_task("once", script), cmd_task("after", "echo next >> runs.txt"))
        runs = tmp_path / "runs.txt"
        assert retry_until(lambda: runs.exists() and "start" in runs.read_text(), 60)
        os.kill(bridge.pid, signal.SIGKILL)
        bridge.wait(30)
        raw = find(TaskQueue(tmp_path / "bq" / "task_queue.json").read(), "once")
        assert raw is not None
        assert raw["status"] == "pending_agent_action"
        bridge = start_foreground(tmp_path)
        assert retry_until(lambda: archived(tmp_path, "processed", "after").exists(), 60)
    finally:
        bridge.send_signal(signal.SIGTERM)
        _out, err = bridge.communicate(timeout=30)
    assert runs.read_text() == "start\nend\nnext\n"
    log = (archived(tmp_path, "processed", "once") / "task.log").read_text()
    assert "resuming a task handed over before a restart" in log
    assert "found its runner's status" in log
    started = [line for line in log.splitlines() if "command c0: runner" in line]
    assert len(started) == 1, log  # the restarted bridge adopted the runner, never spawned one
    assert "resuming" in err


def test_runner_lost_with_the_bridge_fails_the_task_instead_of_running_it_twice(
    tmp_path: pathlib.Path,
) -> None:
    script = "echo start >> runs.txt; sleep 30; echo end >> runs.txt"
    bridge = start_foreground(tmp_path)
    try:
        submit(tmp_path, cmd_task("lost", script))
        runs = tmp_path / "runs.txt"
        assert retry_until(lambda: runs.exists() and "start" in runs.read_text(), 60)
        status = tmp_path / "bq" / "work" / "lost" / "commands" / "c0.status.json"
        assert retry_until(lambda: status.exists() and json.loads(status.read_text())["pid"], 30)
        st = json.loads(status.read_text())
        os.kill(bridge.pid, signal.SIGKILL)
        bridge.wait(30)
        os.kill(st["runner_pid"], signal.SIGKILL)  # the runner dies too
        os.killpg(st["pid"], signal.SIGKILL)
        bridge = start_foreground(tmp_path)
        assert retry_until(lambda: archived(tmp_path, "failed", "lost").exists(), 60)
    finally:
        bridge.send_signal(signal.SIGTERM)
        bridge.communicate(timeout=30)
    assert runs.read_text() == "start\n"
    err = json.loads((archived(tmp_path, "failed", "lost") / "error.json").read_text())
    assert "runner" in err["error"]
    assert "died before the command ended" in err["error"]


def test_the_bridge_wakes_on_a_queue_change_not_on_a_timer(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    bridge = make_bridge(tmp_path, store)

    async def scenario() -> None:
        stop = asyncio.Event()
        # An hour between passes: only the file event can bring the task in within the test.
        serving = asyncio.create_task(bridge.run(stop, backstop=3600))
        await asyncio.wait_for(bridge.waiting.wait(), 30)  # idle: only an event wakes it now
        bridge.queue.submit([cmd_task("evt", "echo hi > evt.txt")])
        done = archived(tmp_path, "processed", "evt")

        async def archived_yet() -> bool:
            return done.exists()

        await aretry_until(archived_yet, 60, what="the task archived")
        stop.set()
        await asyncio.wait_for(serving, 30)

    asyncio.run(scenario())
    assert dict(bridge.finalized) == {"evt": "completed"}
    assert (tmp_path / "evt.txt").read_text() == "hi\n"


class Invalid(t.NamedTuple):
    task_id: str
    details: dict[str, t.Any]
    error: str


INVALID: list[Invalid] = [
    Invalid("empty", {}, "task empty: instruction_details: empty instructions"),
    Invalid(
        "unknown-action",
        {"file_path": "f.txt", "action": "frobnicate", "content": "x"},
        "task unknown-action: instruction_details.file_modifications.0.action: "
        "unknown value 'frobnicate'",
    ),
    Invalid(
        "missing-file",
        {
            "file_path": "nope.txt",
            "action": "insert_after_line",
            "line_marker": "a",
            "content": "x",
        },
        "insert_after_line into a file that does not exist",
    ),
    Invalid(
        "no-marker",
        {"file_path": "f.txt", "action": "insert_before_line", "content": "x"},
        "insert_before_line needs a non-empty line_marker",
    ),
    Invalid(
        "reversed-range",
        {
            "file_path": "f.txt",
            "action": "delete_lines",
            "start_line_number": 3,
            "end_line_number": 1,
        },
        "bad line range 3-1",
    ),
    Invalid(
        "range-past-end",
        {
            "file_path": "f.txt",
            "action": "delete_lines",
            "start_line_number": 1,
            "end_line_number": 9,
        },
        "bad line range 1-9: the file has 2 line(s)",
    ),
    Invalid(
        "marker-absent",
        {"file_path": "f.txt", "action": "insert_after_line", "line_marker": "zz", "content": "x"},
        "no line contains the marker 'zz'",
    ),
    Invalid(
        "not-utf8",
        {"file_path": "latin1.txt", "action": "append_content", "content": "x"},
        "latin1.txt: not valid UTF-8 (byte 0xe9 at offset 3)",
    ),
    Invalid(
        "nul-in-name",
        {"file_path": "f\x00.txt", "action": "append_content", "content": "x"},
        "not a valid file name (embedded null byte)",
    ),
    Invalid(
        "no-workdir",
        {
            "commands_to_execute": [
                {"command_id": "c", "command": "true", "working_directory": "gone"}
            ]
        },
        "command c: working_directory gone does not exist",
    ),
]


def test_each_invalid_task_fails_alone_with_one_line_and_its_error_json(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    (tmp_path / "f.txt").write_bytes(b"a\nb\n")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    bridge = make_bridge(tmp_path, store)
    good = {"file_path": "f.txt", "action": "append_content", "content": "c\n"}
    bridge.queue.submit(
        [
            *({"task_id": c.task_id, "instruction_details": c.details} for c in INVALID),
            {"task_id": "good", "instruction_details": good},
        ]
    )
    asyncio.run(bridge.drain())  # never raises: bad tasks are data, not crashes
    assert dict(bridge.finalized) == {**{c.task_id: "failed" for c in INVALID}, "good": "completed"}
    assert bridge.queue.read() == []
    assert (tmp_path / "f.txt").read_bytes() == b"a\nb\nc\n"
    assert not (tmp_path / "nope.txt").exists()
    assert (tmp_path / "latin1.txt").read_bytes() == b"caf\xe9\n"
    for case in INVALID:
        folder = archived(tmp_path, "failed", case.task_id)
        error = json.loads((folder / "error.json").read_text())
        assert error["task_id"] == case.task_id
        assert error["stage"] == "validation"
        assert error["status"] == "failed"
        assert error["error"].startswith(f"task {case.task_id}: "), error
        assert case.error in error["error"], error
        assert "\n" not in error["error"]
        saved = json.loads((folder / "task.json").read_text())
        assert saved["status"] == "failed"
        assert saved["error"] == error["error"]
        assert "agent_action_details" not in saved  # never handed to an executor
        assert f"invalid: {error['error']}" in (folder / "task.log").read_text()


def test_a_queue_in_the_originals_spelling_runs_as_written(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    (tmp_path / "conf.ini").write_bytes(b"[a]\r\nx=1\r\n# END\r\n")
    bridge = make_bridge(tmp_path, store)
    # Written the way the original bridge's requesters wrote tasks: a files_to_modify list,
    # content_to_insert, instruction, command, rth_timeout_config and outputs_to_capture as
    # file names; plus annotations politerm does not know (kept).
    original = {
        "tasks": [
            {
                "task_id": "orig-edit",
                "status": "pending",
                "notes": "from the meta-agent",
                "history": [],
                "instruction_details": {
                    "instruction": "add y before the end marker",
                    "files_to_modify": [
                        {
                            "file_path": "conf.ini",
                            "action": "insert_before_line",
                            "line_marker": "# END",
                            "content_to_insert": "y=2",
                        }
                    ],
                },
            },
            {
                "task_id": "orig-cmd",
                "status": "pending",
                "instruction_details": {
                    "instruction": "run two commands",
                    "commands_to_execute": [
                        {
                            "command_id": "say",
                            "command": "echo out; echo err >&2",
                            "working_directory": ".",
                            "rth_timeout_config": {"total_timeout": 60, "launch_timeout": 30},
                            "outputs_to_capture": {
                                "stdout_file": "say_out.txt",
                                "status_file": "say_status.json",
                            },
                        },
                        {
                            "command_id": "quiet",
                            "command_string": "echo up; exec sleep 60",
                            "rth_timeout_config": {"activity_timeout": 1},
                        },
                    ],
                },
            },
        ]
    }
    bridge.queue.path.parent.mkdir(parents=True)
    bridge.queue.path.write_text(json.dumps(original))
    asyncio.run(bridge.drain())
    assert dict(bridge.finalized) == {"orig-edit": "completed", "orig-cmd": "failed"}
    assert (tmp_path / "conf.ini").read_bytes() == b"[a]\r\nx=1\r\ny=2\r\n# END\r\n"
    edit = json.loads((archived(tmp_path, "processed", "orig-edit") / "task.json").read_text())
    assert edit["notes"] == "from the meta-agent"
    assert edit["instruction_details"]["instruction"] == "add y before the end marker"
    cmd = archived(tmp_path, "failed", "orig-cmd")
    saved = json.loads((cmd / "task.json").read_text())
    [say, quiet] = saved["agent_action_details"]["commands_to_execute"]
    assert (say["command_string"], say["total_timeout"], say["launch_timeout"]) == (
        "echo out; echo err >&2",
        60.0,
        30.0,
    )
    assert say["outputs_to_capture"] == ["stdout"]
    assert quiet["activity_timeout"] == 1.0
    assert (cmd / "commands" / "say.stdout.log").read_text() == "out\n"
    assert not (cmd / "commands" / "say.stderr.log").exists()  # not asked for
    assert not (tmp_path / "say_out.txt").exists()  # the files are politerm's own
    assert [
        (c["command_id"], c["state"], c["timeout_fired"]) for c in saved["result"]["commands"]
    ] == [
        ("say", "exited", None),
        ("quiet", "timed_out", "activity"),
    ]


def test_an_original_queue_caught_mid_flight_waits_for_its_agent_then_finalizes(
    tmp_path: pathlib.Path, store: RunStore
) -> None:
    bridge = make_bridge(tmp_path, store)
    # Prepared by the original bridge (its agent_action_details, no executor of ours), one
    # task already marked started by its agent with the original's processing_by_agent.
    prepared = {
        "tool_to_call": "edit_file",
        "target_file": "notes.txt",
        "instructions": "append a line",
        "content_to_append": "more",
    }
    queue = {
        "tasks": [
            {
                "task_id": name,
                "status": status,
                "instruction_details": {
                    "files_to_modify": [
                        {"file_path": "notes.txt", "action": "append_content", "content": "more"}
                    ]
                },
                "agent_action_details": prepared,
            }
            for name, status in (
                ("inflight", "pending_agent_action"),
                ("started", "processing_by_agent"),
            )
        ]
    }
    bridge.queue.path.parent.mkdir(parents=True)
    bridge.queue.path.write_text(json.dumps(queue))
    assert not asyncio.run(bridge.step())  # handed to someone else: never handed again
    assert report_task(bridge.queue, "inflight", "processing_by_agent")
    assert not report_task(bridge.queue, "inflight", "processing_by_agent")
    assert not asyncio.run(bridge.step())
    assert [x["status"] for x in bridge.queue.read()] == ["processing_by_agent"] * 2
    report_task(bridge.queue, "inflight", "completed_by_agent", message="appended")
    report_task(bridge.queue, "started", "failed_by_agent", error="no such file")
    asyncio.run(bridge.drain())
    assert dict(bridge.finalized) == {"inflight": "completed", "started": "failed"}
    assert bridge.queue.read() == []
    done = json.loads((archived(tmp_path, "processed", "inflight") / "task.json").read_text())
    assert done["agent_action_details"] == prepared  # kept as the original wrote it
    assert done["result"]["message"] == "appended"
    err = json.loads((archived(tmp_path, "failed", "started") / "error.json").read_text())
    assert (err["stage"], err["error"]) == ("execution", "no such file")
