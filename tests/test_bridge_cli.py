"""``poli bridge`` commands: schema, submit, list, show, report, run-command, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

from politerm.bridge.models import SCHEMA_MODELS, json_schemas

if t.TYPE_CHECKING:
    import pathlib

Q = ("--queue", "bq/task_queue.json")


def poli(
    cwd: pathlib.Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_schema_prints_every_model_and_one_by_name(tmp_path: pathlib.Path) -> None:
    everything = json.loads(poli(tmp_path, "bridge", "schema").stdout)
    assert everything == json_schemas()
    assert set(everything) == {m.__name__ for m in SCHEMA_MODELS}
    task = json.loads(poli(tmp_path, "bridge", "schema", "Task").stdout)
    assert task == everything["Task"]
    bad = poli(tmp_path, "bridge", "schema", "Nope")
    assert bad.returncode == 1
    assert bad.stderr.startswith("poli: no model 'Nope'; known: AgentActionDetails, ")
    assert len(bad.stderr.splitlines()) == 1


def test_submit_list_show_report_from_the_command_line(tmp_path: pathlib.Path) -> None:
    task = {
        "task_id": "t1",
        "instruction_details": {"commands_to_execute": [{"command_id": "c", "command": "true"}]},
    }
    sub = poli(tmp_path, "bridge", "submit", "-", *Q, stdin=json.dumps([task]))
    assert (sub.returncode, sub.stdout) == (0, "t1\n"), sub.stderr
    again = poli(tmp_path, "bridge", "submit", "-", *Q, stdin=json.dumps(task))
    assert again.returncode == 1
    assert again.stderr == "poli: task t1: a task with this task_id is already in the queue\n"
    garbage = poli(tmp_path, "bridge", "submit", "-", *Q, stdin="{nope")
    assert garbage.returncode == 1
    assert garbage.stderr.startswith("poli: <stdin>: not JSON: Expecting property name")
    listed = poli(tmp_path, "bridge", "list", *Q)
    assert listed.stdout.split() == ["t1", "pending"]
    rows = json.loads(poli(tmp_path, "bridge", "list", "--json", *Q).stdout)
    assert rows == [
        {"task_id": "t1", "status": "pending", "tool": None, "executor": None, "error": None}
    ]
    shown = json.loads(poli(tmp_path, "bridge", "show", "t1", *Q).stdout)
    assert shown["task_id"] == "t1"
    missing = poli(tmp_path, "bridge", "show", "zz", *Q)
    assert missing.returncode == 1
    assert missing.stderr.startswith("poli: task zz: not in ")
    early = poli(tmp_path, "bridge", "report", "t1", "--status", "completed_by_agent", *Q)
    assert early.returncode == 1
    assert early.stderr == "poli: task t1: cannot go from pending to completed_by_agent\n"
    queue = tmp_path / "bq" / "task_queue.json"
    data = json.loads(queue.read_text())
    data["tasks"][0]["status"] = "pending_agent_action"
    queue.write_text(json.dumps(data))
    ok = poli(
        tmp_path, "bridge", "report", "t1", "--status", "failed_by_agent", "--error", "no", *Q
    )
    assert (ok.returncode, ok.stdout) == (0, "t1 failed_by_agent\n"), ok.stderr
    assert json.loads(queue.read_text())["tasks"][0]["error"] == "no"


def test_task_text_never_reaches_the_terminal_as_control_sequences(
    tmp_path: pathlib.Path,
) -> None:
    task = {"task_id": "t1", "instruction_details": {"description": "\x1b]0;pwned\x07"}}
    poli(tmp_path, "bridge", "submit", "-", *Q, stdin=json.dumps(task))
    queue = tmp_path / "bq" / "task_queue.json"
    data = json.loads(queue.read_text())
    data["tasks"][0]["error"] = "bad \x1b[2J\x1b[31mred"
    queue.write_text(json.dumps(data))
    for args in (("list",), ("show", "t1")):
        out = poli(tmp_path, "bridge", *args, *Q).stdout
        assert "\x1b" not in out
        assert "\x07" not in out


def test_list_and_show_print_tasks_redacted(tmp_path: pathlib.Path) -> None:
    secret = "sk-proj-" + "k" * 40
    task = {
        "task_id": "t1",
        "instruction_details": {
            "commands_to_execute": [{"command_id": "c", "command": f"curl -H 'key: {secret}'"}]
        },
    }
    poli(tmp_path, "bridge", "submit", "-", *Q, stdin=json.dumps(task))
    queue = tmp_path / "bq" / "task_queue.json"
    data = json.loads(queue.read_text())
    data["tasks"][0]["error"] = f"failed with {secret}"
    queue.write_text(json.dumps(data))
    for args in (("list",), ("list", "--json"), ("show", "t1")):
        out = poli(tmp_path, "bridge", *args, *Q).stdout
        assert secret not in out
        assert "[REDACTED" in out


def test_a_corrupt_queue_is_reported_on_stderr_and_kept(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bq").mkdir()
    (tmp_path / "bq" / "task_queue.json").write_text('{"tasks": [{"task_id": "a"}, {"task_')
    listed = poli(tmp_path, "bridge", "list", "--json", *Q)
    assert listed.returncode == 0
    assert [r["task_id"] for r in json.loads(listed.stdout)] == ["a"]
    assert "was corrupt" in listed.stderr
    assert "recovered 1 task(s): a" in listed.stderr
    backups = list((tmp_path / "bq").glob("task_queue.json.corrupt-*"))
    assert len(backups) == 1
    assert backups[0].read_text() == '{"tasks": [{"task_id": "a"}, {"task_'


def test_run_command_exit_codes_and_status(tmp_path: pathlib.Path) -> None:
    ok = poli(tmp_path, "bridge", "run-command", "--out-dir", "o", "--", "echo", "hi there")
    assert ok.returncode == 0, ok.stderr
    status = json.loads(ok.stdout)
    assert status["state"] == "exited"
    assert (tmp_path / "o" / "cmd.stdout.log").read_text() == "hi there\n"
    failed = poli(tmp_path, "bridge", "run-command", "--out-dir", "o", "exit 7")
    assert failed.returncode == 7
    quiet = poli(
        tmp_path,
        "bridge",
        "run-command",
        "--id",
        "q",
        "--launch-timeout",
        "0.2",
        "--activity-timeout",
        "1",
        "sleep 30",
    )
    assert quiet.returncode == 124
    assert json.loads(quiet.stdout)["timeout_fired"] == "activity"
    assert json.loads(quiet.stdout)["past_launch_timeout"] is True
    missing = poli(tmp_path, "bridge", "run-command", "--id", "m", "no-such-program-poli")
    assert missing.returncode == 127
    assert json.loads(missing.stdout)["error"] == "no-such-program-poli: not found"
    nowhere = poli(tmp_path, "bridge", "run-command", "--cwd", "nope", "true")
    assert nowhere.returncode == 127
    assert json.loads(nowhere.stdout)["state"] == "launch_failed"
    assert "No such file or directory" in json.loads(nowhere.stdout)["error"]
    bad = poli(tmp_path, "bridge", "run-command", "--id", "../x", "true")
    assert bad.returncode == 1
    assert bad.stderr.startswith("poli: run-command: --id '../x': String should match pattern")
    assert len(bad.stderr.splitlines()) == 1


def test_the_default_queue_is_the_projects(tmp_path: pathlib.Path) -> None:
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    (project / "poli.toml").write_text("")
    task = {"task_id": "t1", "instruction_details": {"description": "x"}}
    done = poli(project / "sub", "bridge", "submit", "-", stdin=json.dumps(task))
    assert done.returncode == 0, done.stderr
    assert (project / ".poli" / "bridge" / "task_queue.json").is_file()
    assert not (project / "sub" / ".poli").exists()


def test_the_queue_path_from_the_environment_and_the_option(tmp_path: pathlib.Path) -> None:
    elsewhere = tmp_path / "shared" / "q.json"
    env = {**os.environ, "POLI_BRIDGE_QUEUE": str(elsewhere)}

    def submit(task_id: str, *args: str) -> None:
        task = {"task_id": task_id, "instruction_details": {"description": "x"}}
        done = subprocess.run(
            [sys.executable, "-m", "politerm", "bridge", "submit", "-", *args],
            cwd=tmp_path,
            input=json.dumps(task),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    submit("from-env")
    submit("from-option", *Q)  # --queue wins over the environment
    assert [x["task_id"] for x in json.loads(elsewhere.read_text())["tasks"]] == ["from-env"]
    queue = tmp_path / "bq" / "task_queue.json"
    assert [x["task_id"] for x in json.loads(queue.read_text())["tasks"]] == ["from-option"]
