"""The original bridge's task files run as written (fixtures in its shapes, our contents)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "bridge_original"
Q = ("--queue", "bq/task_queue.json")


def poli(
    cwd: pathlib.Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def archived(tmp_path: pathlib.Path, kind: str, task_id: str) -> dict[str, object]:
    path = tmp_path / "bq" / "archive" / kind / task_id / "task.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_the_originals_task_file_runs_as_written(tmp_path: pathlib.Path) -> None:
    shutil.copy(FIXTURES / "tasks.json", tmp_path / "tasks.json")
    (tmp_path / "journal.txt").write_text("Morning: coffee")  # no final newline
    (tmp_path / "settings.ini").write_text("[old]\nname = x\n; end of settings\n")
    sub = poli(tmp_path, "bridge", "submit", "tasks.json", *Q)
    assert sub.returncode == 0, sub.stderr
    ran = poli(tmp_path, "bridge", "start", "--once", *Q)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(poli(tmp_path, "bridge", "list", "--json", *Q).stdout) == []

    # create_file, its content a list of lines, in a folder that did not exist.
    assert archived(tmp_path, "processed", "orig-create-file")["status"] == "completed"
    assert (tmp_path / "notes" / "todo.md").read_text() == "# To do\n\n- water the plants"
    # create_if_not_exists is the original's name for create_if_missing.
    assert (tmp_path / "VERSION").read_text() == "0.4.2\n"
    # "\nThis line…" appended to a file without a final newline: one line break, not two.
    assert (tmp_path / "journal.txt").read_text() == "Morning: coffee\nThis line closes the day."
    assert (tmp_path / "settings.ini").read_text() == (
        "[main]\n; rewritten\nname = x\ncolour = blue\nsize = 3\n; end of settings\n"
    )

    # Commands with only command_string get ids; a quiet start outlives its launch timeout.
    cmds = archived(tmp_path, "processed", "orig-commands-without-ids")
    assert cmds["status"] == "completed"
    result = cmds["result"]
    assert isinstance(result, dict)
    assert [(c["command_id"], c["state"]) for c in result["commands"]] == [
        ("cmd_0", "exited"),
        ("cmd_1", "exited"),
    ]
    out = tmp_path / "bq" / "archive" / "processed" / "orig-commands-without-ids" / "commands"
    assert json.loads((out / "cmd_0.status.json").read_text())["past_launch_timeout"] is True
    assert (out / "cmd_0.stdout.log").read_text() == "counted\n"
    assert (out / "cmd_1.stdout.log").read_text() == "3\n"

    # Only an instruction: nothing to run, completed (the original did the same).
    only = archived(tmp_path, "processed", "orig-instruction-only")
    assert only["status"] == "completed"
    assert only["notes"] == "no file or command operations"
    assert "only an instruction" in str(only["result"])

    # A program that is not installed is named as not found, not "exit 127".
    missing = archived(tmp_path, "failed", "orig-missing-program")
    assert missing["error"] == "command lint: launch_failed: no-such-linter-poli: not found"


def test_submit_refuses_a_task_the_bridge_would_refuse(tmp_path: pathlib.Path) -> None:
    good = {"task_id": "fine", "instruction_details": {"instruction": "look around"}}
    bad = {
        "task_id": "odd",
        "instruction_details": {
            "files_to_modify": [{"file_path": "a.txt", "action": "frobnicate", "content": "x"}]
        },
    }
    sub = poli(tmp_path, "bridge", "submit", "-", *Q, stdin=json.dumps([good, bad]))
    assert sub.returncode == 1
    assert sub.stderr.startswith(
        "poli: task odd: instruction_details.file_modifications.0.action: "
        "unknown value 'frobnicate'"
    )
    assert len(sub.stderr.splitlines()) == 1
    listed = poli(tmp_path, "bridge", "list", "--json", *Q)
    assert json.loads(listed.stdout or "[]") == []  # nothing was added, not even the good one
