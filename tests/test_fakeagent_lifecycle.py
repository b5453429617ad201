"""The scripted fake agent's turns and life, in real tmux panes: transcripts, approvals, the
trust dialog, crash, hang, interrupt, and the ways it exits (or outlives its session)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import stat
import typing as t

import pytest

from politerm.protocol.transcript import claude_texts
from politerm.testing.fakeagent import prompts
from politerm.testing.retry import retry_until
from tests.fakeagent_helpers import (
    FakePane,
    pid_alive,
    workdir_fixture,  # noqa: F401  # a fixture: pytest finds it here by its name
    write_scenario,
)

if t.TYPE_CHECKING:
    from libtmux.server import Server


TRANSCRIPT_REPLY = """Here is the plan.

[[POLI:MSG {"to":"EXECUTER","id":"{id}"}]]
```json
{"steps": [1, 2]}
```
<PLAN>
1. do it
   keep this indent
</PLAN>
[[/POLI:MSG]]
café ✓
"""


def test_transcript_records_prompts_and_raw_replies(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = tmp_path / "scenario.json"
    rule = {"match": r"id=(?P<id>\w+)", "reply": TRANSCRIPT_REPLY}
    scenario.write_text(json.dumps({"think_time": 0.8, "rules": [rule]}))
    transcript = tmp_path / "session.jsonl"
    agent = FakePane(
        server, workdir, "claude", scenario=scenario, extra=["--transcript", str(transcript)]
    )
    agent.wait_ready()
    assert stat.S_IMODE(transcript.stat().st_mode) == 0o600
    prompt = "plan id=T7\nsecond line é"
    agent.paste(prompt.encode())
    agent.wait_screen("second line")
    agent.keys("Enter")
    agent.wait_screen("esc to interrupt")
    # While the reply is being thought up, only the prompt is in the transcript.
    (user,) = [json.loads(line) for line in transcript.read_text("utf-8").splitlines()]
    assert user["type"] == "user"
    assert user["message"] == {"role": "user", "content": prompt}

    def assistant_lines() -> list[str]:
        lines = transcript.read_text("utf-8").splitlines()
        return [line for line in lines if json.loads(line)["type"] == "assistant"]

    (line,) = retry_until(assistant_lines, 60, what="the assistant line")
    screen = agent.wait_screen("● Here is the plan.")
    raw = TRANSCRIPT_REPLY.replace("{id}", "T7")
    assert claude_texts(line) == [raw]
    assert json.loads(line)["message"]["role"] == "assistant"
    # The screen dropped the fences; the transcript kept them.
    assert "```" not in screen
    assert "```json" in raw
    agent.keys("C-d")
    assert agent.wait_dead() == 0
    kinds = [json.loads(x)["type"] for x in transcript.read_text("utf-8").splitlines()]
    assert kinds == ["user", "assistant"]


APPROVAL_SCENARIO = """
think_time = 0.1
[[rules]]
match = 'please write (?P<file>\\S+)'
approval = "Bash(echo hi > {file})"
write_file = { path = "{file}", content = "hi\\n" }
reply = "Wrote {file}."
deny_reply = "Okay, I did not write {file}."
"""


class ApprovalCase(t.NamedTuple):
    test_id: str
    question: str
    first_option: str
    approve: str
    deny: str


APPROVAL_CASES = [
    ApprovalCase("claude", "Do you want to proceed?", " ❯ 1. Yes", "Enter", "3"),
    ApprovalCase(
        "codex",
        "Would you like to run the following command?",
        "› 1. Yes, proceed (y)",
        "y",
        "Escape",
    ),
    ApprovalCase("gemini", "Allow execution of [Shell]?", "● 1. Allow once", "1", "n"),
]


@pytest.mark.parametrize("case", APPROVAL_CASES, ids=[c.test_id for c in APPROVAL_CASES])
def test_approval_approve_writes_deny_does_not(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path, case: ApprovalCase
) -> None:
    scenario = write_scenario(tmp_path, APPROVAL_SCENARIO)
    agent = FakePane(server, workdir, case.test_id, scenario=scenario)
    agent.wait_ready()
    agent.type("please write yes.txt")
    agent.wait_screen("please write yes.txt")
    agent.keys("Enter")
    screen = agent.wait_screen(case.question)
    assert case.first_option in screen
    assert "echo hi > yes.txt" in screen
    agent.keys(case.approve)
    agent.wait_screen("Wrote yes.txt.")
    assert (workdir / "yes.txt").read_text() == "hi\n"
    agent.type("please write no.txt")
    agent.wait_screen("please write no.txt")
    agent.keys("Enter")
    agent.wait_screen("echo hi > no.txt")
    agent.wait_screen(case.question)
    agent.keys(case.deny)
    agent.wait_screen("I did not write no.txt.")
    assert not (workdir / "no.txt").exists()
    decisions = [(e["command"], e["approved"]) for e in agent.events("approval")]
    assert decisions == [("echo hi > yes.txt", True), ("echo hi > no.txt", False)]


@pytest.mark.parametrize(
    ("mode", "question", "option"),
    [
        ("claude", "Do you trust the files in this folder?", "❯ 1. Yes, proceed"),
        ("codex", "Trust this folder?", "› 1. Trust and continue"),
    ],
)
def test_trust_dialog(
    server: Server,
    workdir: pathlib.Path,
    tmp_path: pathlib.Path,
    mode: str,
    question: str,
    option: str,
) -> None:
    scenario = write_scenario(tmp_path, "trust_dialog = true\n")
    agent = FakePane(server, workdir, mode, scenario=scenario)
    screen = agent.wait_screen(question)
    assert option in screen
    agent.keys("Enter")
    (dialog,) = agent.wait_event("dialog")
    assert dialog["dialog"] == "trust"
    assert dialog["accepted"] is True
    agent.wait_ready()
    agent.wait_gone(question)


def test_crash_exits_nonzero_after_logging(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, '[[rules]]\nmatch = "boom"\naction = "crash"\n')
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.type("boom now")
    agent.wait_screen("boom now")
    agent.keys("Enter")
    assert agent.wait_dead() == 3
    assert [e["event"] for e in agent.events()][-2:] == ["prompt", "crash"]
    assert prompts(agent.log) == [b"boom now"]


def test_hang_ignores_input(server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    scenario = write_scenario(tmp_path, '[[rules]]\nmatch = "stall"\naction = "hang"\n')
    agent = FakePane(server, workdir, "codex", scenario=scenario)
    agent.wait_ready()
    agent.type("stall")
    agent.wait_screen("› stall")
    agent.keys("Enter")
    agent.wait_screen("esc to interrupt")
    agent.keys("Escape")
    agent.keys("C-c")
    agent.type("more")
    agent.keys("Enter")
    # Every key was received (logged) and none of them did anything.
    retry_until(
        lambda: (
            [e.get("key") for e in agent.events("key")][-4:] == ["esc", "ctrl-c", "text", "enter"]
        ),
        5,
        what="the keys sent during the hang to be logged",
    )
    assert agent.events("interrupt") == []
    assert len(agent.events("prompt")) == 1
    screen = agent.wait_screen("Working (1s")
    assert "esc to interrupt" in screen
    assert agent.dead_status() is None


def test_escape_interrupts_busy_turn(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "think_time = 30\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.type("slow one")
    agent.wait_screen("slow one")
    agent.keys("Enter")
    agent.wait_screen("esc to interrupt")
    agent.keys("Escape")
    agent.wait_event("interrupt")
    screen = agent.wait_screen("? for shortcuts")
    assert "Interrupted" in screen
    assert "ECHO" not in screen


def test_ctrl_c_twice_exits_cleanly(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "codex")
    agent.wait_ready()
    agent.keys("C-c")
    agent.wait_screen("Press Ctrl-C again to exit")
    agent.keys("C-c")
    assert agent.wait_dead() == 0
    (exit_event,) = agent.events("exit")
    assert exit_event["reason"] == "ctrl-c"


def test_ctrl_d_exits_and_log_is_private(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "plain")
    agent.wait_ready()
    assert stat.S_IMODE(agent.log.stat().st_mode) == 0o600
    agent.keys("C-d")
    assert agent.wait_dead() == 0
    assert [e["event"] for e in agent.events()][-1] == "exit"


def test_ignore_sighup_outlives_kill_session(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "ignore_sighup = true\nspawn_child = true\n")
    agent = FakePane(server, workdir, "gemini", scenario=scenario)
    agent.wait_ready()
    (start,) = agent.events("start")
    pids = [start["pid"], start["child_pid"]]
    try:
        agent.tmux("kill-session", "-t", "fa")
        agent.wait_event("stdin_closed")
        assert all(pid_alive(pid) for pid in pids)
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
