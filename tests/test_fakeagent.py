"""The scripted fake agent TUI, driven through real tmux panes."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import time
import typing as t

import pytest

from politerm.protocol.transcript import claude_texts
from politerm.testing.fakeagent import Mode, bundled_scenario, load_scenario, prompts
from politerm.testing.fakeagent.keys import KeyDecoder
from politerm.testing.retry import retry_until
from tests.fakeagent_helpers import FakePane, pid_alive

if t.TYPE_CHECKING:
    from libtmux.server import Server


def write_scenario(tmp_path: pathlib.Path, body: str, name: str = "scenario.toml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(body, "utf-8")
    return path


@pytest.fixture
def workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


class ModeCase(t.NamedTuple):
    test_id: str
    ready: tuple[str, ...]
    busy: tuple[str, ...]
    reply: str
    done: str | None


MODE_CASES = [
    ModeCase(
        "claude",
        ("❯", "? for shortcuts", "─" * 200),
        (" Thinking…", "  esc to interrupt"),
        "● ECHO: hello world",
        "✻ Brewed for ",
    ),
    ModeCase(
        "codex",
        ("› Ask Codex to do anything", "  ← for agents · ? for shortcuts"),
        (" Working (0s • esc to interrupt)",),
        "• ECHO: hello world",
        "  Worked for ",
    ),
    ModeCase(
        "gemini",
        (
            " >   Type your message or @path/to/file",
            "▄" * 200,
            "▀" * 200,
            " workspace (/directory)",
        ),
        (" Thinking... (esc to cancel, 0s)",),
        "✦ ECHO: hello world",
        None,
    ),
    ModeCase("plain", ("fakeagent (plain)",), (), "ECHO: hello world", None),
]


@pytest.mark.parametrize("case", MODE_CASES, ids=[c.test_id for c in MODE_CASES])
def test_mode_ready_busy_reply(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path, case: ModeCase
) -> None:
    scenario = write_scenario(tmp_path, "think_time = 1.0\n")
    agent = FakePane(server, workdir, case.test_id, scenario=scenario)
    screen = agent.wait_ready()
    for text in case.ready:
        assert text in screen
    agent.type("hello world")
    agent.wait_screen("hello world")
    agent.keys("Enter")
    agent.wait_event("prompt")
    if case.busy:
        screen = agent.wait_screen(case.busy[0], 2)
        for text in case.busy:
            assert text in screen
    screen = agent.wait_screen(case.reply, 5)
    assert screen.split("\n").count(case.reply) == 1
    if case.done:
        assert case.done in screen
    if case.test_id == "plain":
        assert agent.lines()[-1] == ">" or ">" in agent.lines()
    assert prompts(agent.log) == [b"hello world"]


def test_claude_input_box_states(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    agent.type("draft")
    screen = agent.wait_screen("ctrl+g to edit in Vim")
    assert "❯\u00a0draft" in screen
    assert "? for shortcuts" not in screen


def test_multiline_paste_logged_exact_and_echoed(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    data = b"line one\nline two\n  indented\there\n\xff raw byte"
    agent.paste(data)
    agent.wait_screen("line two")
    agent.keys("Enter")
    agent.wait_event("prompt")
    screen = agent.wait_screen("● ECHO: line one")
    lines = [line.rstrip() for line in screen.split("\n")]
    at = lines.index("❯ line one")
    assert lines[at + 1 : at + 3] == ["  line two", "    indented  here"]
    assert prompts(agent.log) == [data]
    (record,) = agent.events("prompt")
    assert record["len"] == len(data)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["n"] == 1


def test_one_mib_paste_is_fast_and_exact(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    line = b"0123456789 abcdefghijklmnopqrstuvwxyz \xc3\xa9\xe2\x9c\x93 ~!@#$%^&*()\n"
    data = (line * (1024 * 1024 // len(line) + 1))[: 1024 * 1024]
    started = time.monotonic()
    agent.paste(data)
    agent.wait_event("paste", 10)
    took = time.monotonic() - started
    assert took < 3.0, f"1 MiB paste took {took:.2f}s"
    lines = data.count(b"\n")
    agent.wait_screen(f"[Pasted text #1 +{lines} lines]")
    agent.keys("Enter")
    (record,) = agent.wait_event("prompt", 10)
    assert record["len"] == len(data)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert prompts(agent.log) == [data]
    agent.wait_screen("● ECHO: 0123456789")


def test_hostile_text_is_logged_verbatim_and_never_run(
    server: Server, workdir: pathlib.Path
) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    canary = workdir / "canary"
    data = (
        b"C-c Enter $(touch canary) `touch canary`; touch canary && rm -rf ~ |\n"
        b"\x03 \x04 \r \x1b \x1b[2J\x1b[H\x1b]0;pwned\x07 \x1b[201 done"
    )
    agent.paste(data)
    agent.wait_screen("touch canary")
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.type("$(touch canary) `touch canary`; touch canary")
    agent.wait_screen("❯\u00a0$(touch")
    agent.keys("Enter")
    agent.wait_event("prompt", count=2)
    screen = agent.wait_screen("● ECHO: $(touch canary)")
    assert prompts(agent.log) == [data, b"$(touch canary) `touch canary`; touch canary"]
    assert not canary.exists()
    # The pasted ESC [2J was shown as text, not obeyed: the banner is still there.
    assert "Claude Code" in screen
    assert "^[[2J" in agent.screen(history=True)
    assert agent.dead_status() is None


def test_swallow_first_enter_after_paste(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_first_enter_after_paste = true\n")
    agent = FakePane(server, workdir, "gemini", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"first line\nsecond line")
    agent.wait_screen(" > first line")
    agent.keys("Enter")
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "after_paste"
    assert agent.events("prompt") == []
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.wait_screen("✦ ECHO: first line")
    assert prompts(agent.log) == [b"first line\nsecond line"]


def test_swallow_enter_in_burst(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_enter_in_burst = true\n")
    agent = FakePane(server, workdir, "codex", scenario=scenario)
    agent.wait_ready()
    agent.keys("burst", "Enter")  # one send-keys: text and Enter reach it in one read()
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "burst"
    agent.wait_screen("› burst")
    assert agent.events("prompt") == []
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.wait_screen("• ECHO: burst")
    # A paste followed at once by Enter is not a burst of typing.
    agent.paste(b"pasted")
    agent.keys("Enter")
    agent.wait_event("prompt", count=2)
    assert prompts(agent.log) == [b"burst", b"pasted"]


def test_swallow_enter_in_burst_window_covers_a_paste(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_enter_in_burst = true\nburst_window = 0.5\n")
    agent = FakePane(server, workdir, "codex", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"pasted")
    agent.keys("Enter")
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "burst"
    assert agent.events("prompt") == []

    def enter_until_submitted() -> bool:
        agent.keys("Enter")
        return bool(agent.events("prompt"))

    # Once the window has passed, Enter submits again.
    retry_until(enter_until_submitted, 60, interval=0.2, what="an Enter after the burst window")
    assert prompts(agent.log) == [b"pasted"]


def test_swallow_all_enters_keeps_the_input_stuck(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_all_enters = true\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"stuck forever")
    agent.wait_screen("❯\u00a0stuck forever")
    for count in (1, 2, 3):
        agent.keys("Enter")
        agent.wait_event("swallowed_enter", count=count)
    agent.type("!")
    agent.keys("Enter")
    swallowed = agent.wait_event("swallowed_enter", count=4)
    assert {e["reason"] for e in swallowed} == {"all"}
    assert agent.events("prompt") == []
    assert "❯\u00a0stuck forever!" in agent.wait_screen("stuck forever!")
    assert agent.dead_status() is None


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


def test_list_reindent_like_codex(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(
        tmp_path,
        "list_reindent = true\nthink_time = 0.1\n"
        "[[rules]]\n"
        "reply = '''\nHere is the plan.\n\n"
        '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]\n'
        "<PLAN>\n1. do the thing\n2. check the thing\n</PLAN>\n"
        "[[/POLI:MSG]]\n\nEnd of plan.\n'''\n",
    )
    agent = FakePane(server, workdir, "codex", scenario=scenario, extra=["--no-alt-screen"])
    agent.wait_ready()
    agent.type("plan")
    agent.wait_screen("› plan")
    agent.keys("Enter")
    agent.wait_screen("End of plan.")
    lines = agent.lines()
    at = lines.index("• Here is the plan.")
    assert lines[at : at + 10] == [
        "• Here is the plan.",
        "",
        '  [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]',
        "  <PLAN>",
        "  1. do the thing",
        "  2. check the thing",
        "     </PLAN>",
        "     [[/POLI:MSG]]",
        "",
        "  End of plan.",
    ]


def test_long_reply_wraps_with_continuation_indent(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    header = (
        '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T3","note":"'
        + " ".join(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"] * 2)
        + '"}]]'
    )
    scenario = write_scenario(
        tmp_path, f"think_time = 0.1\n[[rules]]\nreply = '''{header}\nbody'''\n"
    )
    agent = FakePane(server, workdir, "claude", scenario=scenario, width=80, height=30)
    agent.wait_ready()
    agent.type("go")
    agent.wait_screen("❯\u00a0go")
    agent.keys("Enter")
    agent.wait_screen("  body")
    lines = agent.lines()
    at = next(i for i, line in enumerate(lines) if line.startswith("● [[POLI:MSG"))
    block = lines[at : lines.index("  body")]
    assert len(block) > 1
    assert all(len(line) <= 80 for line in block)
    assert all(line.startswith("  ") and not line.startswith("   ") for line in block[1:])
    assert " ".join(line[2:] for line in block) == header


def test_resize_redraws_at_new_width(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "claude", width=120, height=30)
    agent.wait_ready()
    assert "─" * 120 in agent.screen()
    agent.tmux("resize-window", "-t", agent.pane_id, "-x", "70", "-y", "30")
    agent.wait_event("resize")
    retry_until(
        lambda: ("─" * 70) in agent.lines() and agent.lines().count("❯") == 1,
        5,
        what="the input box redrawn at 70 columns",
    )


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


class BadScenario(t.NamedTuple):
    test_id: str
    body: str
    message: str


BAD_SCENARIOS = [
    BadScenario("unknown-key", "thinktime = 1\n", "key 'thinktime': Extra inputs"),
    BadScenario("negative", "[[rules]]\nthink_time = -1\n", "key 'rules.0.think_time'"),
    BadScenario(
        "bad-regex", "[[rules]]\nmatch = '('\n", "key 'rules.0.match': Value error, bad regex"
    ),
    BadScenario("bad-action", '[[rules]]\naction = "explode"\n', "key 'rules.0.action'"),
    BadScenario("toml-syntax", "mode = \n", "not valid toml"),
]


@pytest.mark.parametrize("case", BAD_SCENARIOS, ids=[c.test_id for c in BAD_SCENARIOS])
def test_malformed_scenario_exits_2(tmp_path: pathlib.Path, case: BadScenario) -> None:
    path = write_scenario(tmp_path, case.body)
    result = subprocess.run(
        [sys.executable, "-m", "politerm.testing.fakeagent", "--scenario", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0]
    assert case.message in lines[0]


def test_demo_planner_and_executer(server: Server, workdir: pathlib.Path) -> None:
    planner = FakePane(
        server, workdir, "claude", scenario=bundled_scenario("demo-planner"), name="planner"
    )
    executer = FakePane(
        server, workdir, "codex", scenario=bundled_scenario("demo-executer"), name="executer"
    )
    planner.wait_ready()
    executer.wait_ready()
    planner.paste(b"Plan this task.\nTASK_ID=T9\nSay hello.\nnonce=00ff12\n")
    planner.keys("Enter")
    plan = '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T9","nonce":"00ff12"}]]'
    screen = planner.wait_screen(plan, 10)
    assert "  <PLAN>" in screen
    assert "  1. Create hello.txt containing a greeting." in screen
    assert "```" not in screen

    executer.paste(f"Carry out this plan. nonce=abc123\n{plan}\n<PLAN>\n1. x\n</PLAN>\n".encode())
    executer.keys("Enter")
    executer.wait_screen("Creating hello.txt", 10)
    result = '[[POLI:MSG {"to":"PLANNER","type":"result","id":"T9","nonce":"abc123"}]]'
    executer.wait_screen(result, 10)
    assert (workdir / "hello.txt").read_text().startswith("Hello")

    planner.paste(f"EXECUTER replied:\n{result}\n<RESULT>ok</RESULT>\nnonce=beef01\n".encode())
    planner.keys("Enter")
    final = '[[POLI:MSG {"to":"USER","type":"final","id":"T9","nonce":"beef01"}]]'
    screen = planner.wait_screen(final, 10)
    assert "  <REPORT>" in screen


class DecodeCase(t.NamedTuple):
    test_id: str
    data: bytes
    expected: list[tuple[str, bytes, str]]


DECODE_CASES = [
    DecodeCase("typed-enter", b"ab\r", [("text", b"ab", ""), ("key", b"", "enter")]),
    DecodeCase("lf-is-enter", b"\n", [("key", b"", "enter")]),
    DecodeCase(
        "paste-keeps-everything",
        b"\x1b[200~a\x1b[A\x03\r\n\x1b[200~b\x1b[201~\x7f",
        [("paste", b"a\x1b[A\x03\r\n\x1b[200~b", ""), ("key", b"", "backspace")],
    ),
    DecodeCase("arrows", b"\x1b[A\x1bOB", [("key", b"", "up"), ("key", b"", "down")]),
    DecodeCase("esc-then-ctrl-c", b"\x1b\x03", [("key", b"", "esc"), ("key", b"", "ctrl-c")]),
    DecodeCase("utf8-text", "é✓".encode(), [("text", "é✓".encode(), "")]),
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=[c.test_id for c in DECODE_CASES])
@pytest.mark.parametrize("chunk", [1, 3, 1 << 16], ids=["bytewise", "by-3", "whole"])
def test_key_decoder(case: DecodeCase, chunk: int) -> None:
    decoder = KeyDecoder()
    events = []
    for i in range(0, len(case.data), chunk):
        events += decoder.feed(case.data[i : i + chunk])
    events += decoder.flush()
    got = [(e.kind.value, e.data, e.key) for e in events]
    if chunk < len(case.data) and case.test_id in ("typed-enter", "utf8-text"):
        # Typed text may arrive in pieces; joined it must be the same.
        text = b"".join(e[1] for e in got if e[0] == "text")
        got = [("text", text, "")] + [e for e in got if e[0] != "text"]
    assert got == case.expected


def test_key_decoder_one_mib_paste_is_linear() -> None:
    data = b"\x1b[200~" + bytes(range(256)).replace(b"\x1b", b"") * 4200 + b"\x1b[201~"
    decoder = KeyDecoder()
    started = time.monotonic()
    events = []
    for i in range(0, len(data), 4095):
        events += decoder.feed(data[i : i + 4095])
    assert time.monotonic() - started < 0.5
    (paste,) = events
    assert paste.data == data[6:-6]


def test_json_scenario_and_bundled_names(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"mode": "gemini", "rules": [{"match": "x", "reply": "y"}]}')
    scenario = load_scenario(path)
    assert scenario.mode is Mode.GEMINI
    assert scenario.pick("axb")[1].reply == "y"
    for name in ("echo", "demo-planner", "demo-executer"):
        assert load_scenario(bundled_scenario(name)).rules is not None
