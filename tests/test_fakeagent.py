"""The scripted fake agent TUI, driven through real tmux panes: each mode's screens, its
rendering (list re-indent, wrapping, resize), and scenarios (bad ones, the demo pair, JSON).

Input (pastes, swallowed Enters, the key decoder) is in test_fakeagent_input.py; turns,
dialogs, approvals, crashes, hangs and exits in test_fakeagent_lifecycle.py."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import typing as t

import pytest

from politerm.testing.fakeagent import Mode, bundled_scenario, load_scenario, prompts
from politerm.testing.retry import retry_until
from tests.fakeagent_helpers import (
    FakePane,
    workdir_fixture,  # noqa: F401  # a fixture: pytest finds it here by its name
    write_scenario,
)

if t.TYPE_CHECKING:
    from libtmux.server import Server


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
    BadScenario(
        "missing-path", "[[rules]]\nwrite_file = {content = 'x'}\n", "rules.0.write_file.path"
    ),
    BadScenario("fraction-seed", "[faults]\nseed = 1.5\n", "fractional part"),
    BadScenario("list-wanted", "status_lines = 'x'\n", "key 'status_lines': Input should be a"),
    BadScenario("two-problems", "mode = 'x'\nthink_time = 'y'\n", "key 'mode'"),
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


class LaxValue(t.NamedTuple):
    test_id: str
    body: str
    key: str
    value: object


# Values a scenario could always give in another type (as pydantic's lax mode took them).
LAX_VALUES = [
    LaxValue("int-as-float", "think_time = 1\n", "think_time", 1.0),
    LaxValue("string-as-float", "think_time = ' 0.5'\n", "think_time", 0.5),
    LaxValue("word-as-bool", "trust_dialog = 'Yes'\n", "trust_dialog", True),
    LaxValue("zero-as-bool", "strip_fences = 0\n", "strip_fences", False),
    LaxValue("whole-float-as-int", "[faults]\nseed = 2.0\n", "seed", 2),
    LaxValue("string-as-int", "[faults]\ncrash_max = '3'\n", "crash_max", 3),
]


@pytest.mark.parametrize("case", LAX_VALUES, ids=[c.test_id for c in LAX_VALUES])
def test_scenario_values_in_another_type_are_taken(tmp_path: pathlib.Path, case: LaxValue) -> None:
    scenario = load_scenario(write_scenario(tmp_path, case.body))
    owner = scenario.faults if case.body.startswith("[faults]") else scenario
    value = getattr(owner, case.key)
    assert value == case.value and type(value) is type(case.value)


def test_a_fake_agent_starts_without_pydantic_or_openssl(tmp_path: pathlib.Path) -> None:
    # What every fake agent imports before its first screen, with a scenario: importing
    # pydantic and building models cost ~0.1 s of CPU per agent (50 s at 500 agents).
    code = (
        "import sys\n"
        "from politerm.testing.fakeagent.launch import _resolve_scenario\n"
        "_resolve_scenario('demo-planner')\n"
        "heavy = ('pydantic', 'hashlib', 'subprocess', 'uuid')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_json_scenario_and_bundled_names(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"mode": "gemini", "rules": [{"match": "x", "reply": "y"}]}')
    scenario = load_scenario(path)
    assert scenario.mode is Mode.GEMINI
    assert scenario.pick("axb")[1].reply == "y"
    for name in ("echo", "demo-planner", "demo-executer"):
        assert load_scenario(bundled_scenario(name)).rules is not None
