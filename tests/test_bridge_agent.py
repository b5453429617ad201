"""The agent executor on the bundled fake agent: one prompt per task, reports, verification."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import typing as t

import pytest

from politerm.bridge.agent import AgentExecutor
from politerm.bridge.bridge import Bridge
from politerm.bridge.queue import TaskQueue
from politerm.config import load_config
from politerm.driver import TurnOutcome
from politerm.store import RunStore
from politerm.store.bridge import BridgeJournal
from politerm.store.journal import Serves, Workflow
from politerm.testing.fakeagent import prompts
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Iterator

BLOCK = """
[[POLI:MSG {{"to":"BRIDGE","type":"{kind}","id":"{{id}}","nonce":"{{nonce}}"}}]]
{body}
[[/POLI:MSG]]
"""

SCENARIO = f"""
[[rules]]
match = '(?s)BRIDGE TASK (?P<id>good) \\(nonce (?P<nonce>[0-9a-f]+)\\)'
reply = '''{BLOCK.format(kind="done", body="appended c")}'''
[rules.write_file]
path = "f.txt"
content = "a\\nb\\nc\\n"

[[rules]]
match = '(?s)BRIDGE TASK (?P<id>lying) \\(nonce (?P<nonce>[0-9a-f]+)\\)'
reply = '''{BLOCK.format(kind="done", body="sure, done")}'''

[[rules]]
match = '(?s)BRIDGE TASK (?P<id>cant) \\(nonce (?P<nonce>[0-9a-f]+)\\)'
reply = '''{BLOCK.format(kind="failed", body="no such function")}'''

[[rules]]
match = '(?s)BRIDGE TASK (?P<id>note) \\(nonce (?P<nonce>[0-9a-f]+)\\).*Follow this instruction'
reply = '''{BLOCK.format(kind="done", body="reviewed the notes")}'''
"""


FENCE = """
```poli:bridge-{{id}}-{{nonce}}
status: {status}
commit_msg: {msg}
{extra}```
"""

ESCALATION = "escalation: no such line\n"

# A CLI that shows fence lines (claude's TUI hides them; see docs/bridge.md).
FENCED_SCENARIO = f"""
strip_fences = false

[[rules]]
match = '(?s)BRIDGE TASK (?P<id>good) \\(nonce (?P<nonce>[0-9a-f]+)\\)'
reply = '''{FENCE.format(status="success", msg="appended c", extra="")}'''
[rules.write_file]
path = "f.txt"
content = "a\\nb\\nc\\n"

[[rules]]
match = '(?s)BRIDGE TASK (?P<id>cant) \\(nonce (?P<nonce>[0-9a-f]+)\\)'
reply = '''{FENCE.format(status="needs_help", msg="stuck", extra=ESCALATION)}'''
"""


def write_project(tmp_path: pathlib.Path, scenario: str = SCENARIO) -> pathlib.Path:
    (tmp_path / "scenario.toml").write_text(scenario)
    argv = [
        sys.executable,
        "-m",
        "politerm.testing.fakeagent",
        "--mode",
        "claude",
        "--scenario",
        str(tmp_path / "scenario.toml"),
        "--log",
        str(tmp_path / "agent"),
    ]
    config = tmp_path / "poli.toml"
    config.write_text(
        "[agents.EDITOR]\n"
        f"command = {json.dumps(argv)}\n"
        'profile = "fake-claude"\n'
        f'cwd = "{tmp_path}"\n'
        f'[store]\npath = "{tmp_path / "runs.sqlite3"}"\n'
    )
    (tmp_path / "f.txt").write_text("a\nb\n")
    (tmp_path / "g.txt").write_text("g\n")
    return config


TASKS = [
    {
        "task_id": "good",
        "instruction_details": {"file_path": "f.txt", "action": "append_content", "content": "c\n"},
    },
    {
        "task_id": "lying",
        "instruction_details": {
            "file_path": "g.txt",
            "action": "replace_content",
            "content": "G\n",
        },
    },
    {
        "task_id": "cant",
        "instruction_details": {
            "file_path": "g.txt",
            "action": "insert_after_line",
            "line_marker": "g",
            "content": "x",
        },
    },
]


@pytest.fixture
def project(tmp_path: pathlib.Path) -> Iterator[tuple[pathlib.Path, RunStore]]:
    config = write_project(tmp_path)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        yield config, store


def make_bridge(
    tmp_path: pathlib.Path, store: RunStore, config: pathlib.Path, report: str = "block"
) -> Bridge:
    queue = TaskQueue(tmp_path / "bq" / "task_queue.json")
    executor = AgentExecutor(
        "EDITOR", load_config(config_path=config), turn_timeout=60, report=report
    )
    return Bridge(queue, executor, BridgeJournal(store, str(queue.path)), base_dir=tmp_path)


def archived(tmp_path: pathlib.Path, kind: str, task_id: str) -> pathlib.Path:
    return tmp_path / "bq" / "archive" / kind / task_id


async def run(bridge: Bridge) -> None:
    try:
        async with asyncio.timeout(110):
            await bridge.drain()
    finally:
        await bridge.executor.close()


def test_agent_executes_reports_and_is_verified(
    tmp_path: pathlib.Path, project: tuple[pathlib.Path, RunStore]
) -> None:
    config, store = project
    bridge = make_bridge(tmp_path, store, config)
    bridge.queue.submit(TASKS)
    asyncio.run(run(bridge))
    finalized = dict(bridge.finalized)
    assert finalized == {"good": "completed", "lying": "failed", "cant": "failed"}
    assert (tmp_path / "f.txt").read_text() == "a\nb\nc\n"
    # One prompt per task, each naming its task and asking for its block.
    sent = [p.decode() for p in prompts(tmp_path / "agent")]
    assert [p.splitlines()[0].split()[2] for p in sent] == ["good", "lying", "cant"]
    assert '"tool": "edit_file"' not in sent[0]
    assert "Call the tool edit_file" in sent[0]
    assert str(tmp_path / "f.txt") in sent[0]
    good = json.loads((archived(tmp_path, "processed", "good") / "task.json").read_text())
    assert good["result"]["message"] == "appended c"
    assert good["agent_action_details"]["executor"] == "agent:EDITOR"
    lying = json.loads((archived(tmp_path, "failed", "lying") / "error.json").read_text())
    assert lying["stage"] == "verification"
    assert "does not have the requested content" in lying["error"]
    cant = json.loads((archived(tmp_path, "failed", "cant") / "error.json").read_text())
    assert cant["stage"] == "execution"
    assert cant["error"] == "agent failed: no such function"
    assert isinstance(bridge.executor, AgentExecutor)
    assert bridge.executor.driver is None  # closed: its process tree is gone
    # one row per task's prompt in the journal of turns, naming its step
    rows = [store.journal_of("bridge_steps", (str(bridge.queue.path), t, 0)) for t in finalized]
    assert [[(r.workflow, r.state.value, r.outcome) for r in each] for each in rows] == [
        [("bridge", "ended", "answered")]
    ] * 3


def test_a_task_with_only_an_instruction_is_handed_to_the_agent(
    tmp_path: pathlib.Path, project: tuple[pathlib.Path, RunStore]
) -> None:
    # The original bridge's placeholder task: no file, no command, an instruction.
    config, store = project
    bridge = make_bridge(tmp_path, store, config)
    note = {"task_id": "note", "instruction_details": {"instruction": "Review the notes."}}
    bridge.queue.submit([note])
    asyncio.run(run(bridge))
    assert dict(bridge.finalized) == {"note": "completed"}
    sent = [p.decode() for p in prompts(tmp_path / "agent")]
    assert len(sent) == 1
    assert "Follow this instruction:\nReview the notes." in sent[0]
    done = json.loads((archived(tmp_path, "processed", "note") / "task.json").read_text())
    assert done["agent_action_details"]["tool_to_call"] == "follow_instruction"
    assert done["result"]["message"] == "reviewed the notes"


def test_agent_reports_through_a_fenced_report(tmp_path: pathlib.Path) -> None:
    config = write_project(tmp_path, FENCED_SCENARIO)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        bridge = make_bridge(tmp_path, store, config, report="fenced")
        bridge.queue.submit([TASKS[0], TASKS[2]])
        asyncio.run(run(bridge))
    assert dict(bridge.finalized) == {"good": "completed", "cant": "failed"}
    assert (tmp_path / "f.txt").read_text() == "a\nb\nc\n"
    sent = [p.decode() for p in prompts(tmp_path / "agent")]
    assert len(sent) == 2
    assert "```poli:<SESSION_ID>" in sent[0]
    good = json.loads((archived(tmp_path, "processed", "good") / "task.json").read_text())
    assert good["result"]["message"] == "appended c"
    cant = json.loads((archived(tmp_path, "failed", "cant") / "error.json").read_text())
    assert cant["error"] == "agent needs help: no such line"


def test_a_task_whose_turn_was_cut_by_a_restart_is_never_delivered_again(
    tmp_path: pathlib.Path, project: tuple[pathlib.Path, RunStore]
) -> None:
    config, store = project
    bridge = make_bridge(tmp_path, store, config)
    bridge.queue.submit([TASKS[0], {**TASKS[1], "task_id": "undone"}])
    # As if a bridge handed both over, journalled the agent turn, and was killed -9.
    assert bridge._prepare("good")
    assert bridge._prepare("undone")
    queue = str(bridge.queue.path)
    for tid in ("good", "undone"):
        bridge.journal.start(tid, 0, "agent", {"agent": "EDITOR", "nonce": "dead"})
        # the dead bridge's driver had handed the prompt (its row in the journal of turns)
        serves = Serves(Workflow.BRIDGE, "bridge_steps", (queue, tid, 0))
        store.journal_hand("EDITOR", serves, text=f"task {tid}", nonce="dead")
    (tmp_path / "f.txt").write_text("a\nb\nc\n")  # the agent had finished "good"
    restarted = make_bridge(tmp_path, store, config)
    asyncio.run(run(restarted))
    assert dict(restarted.finalized) == {"good": "completed", "undone": "failed"}
    # Nothing was handed over twice: the agent was not even started.
    assert not (tmp_path / "agent").exists()
    err = json.loads((archived(tmp_path, "failed", "undone") / "error.json").read_text())
    assert "not handed over again" in err["error"]
    rows = [store.journal_of("bridge_steps", (queue, t, 0)) for t in ("good", "undone")]
    assert [[(r.state.value, r.outcome) for r in each] for each in rows] == [
        [("abandoned", "the bridge restarted during the turn")]
    ] * 2
    assert store.journal_open() == []


def test_cli_serves_the_queue_with_an_agent(
    tmp_path: pathlib.Path, project: tuple[pathlib.Path, RunStore]
) -> None:
    config, _store = project
    (tmp_path / "t.json").write_text(json.dumps(TASKS[0]))
    q = ["--queue", "bq/task_queue.json"]
    sub = subprocess.run(
        [sys.executable, "-m", "politerm", "bridge", "submit", "t.json", *q],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sub.returncode == 0, sub.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "politerm",
            "bridge",
            "start",
            "--once",
            *q,
            "--executor",
            "agent:EDITOR",
            "--config",
            str(config),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "good completed"
    bad = subprocess.run(
        [sys.executable, "-m", "politerm", "bridge", "start", "--once", *q, "--executor", "robot"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip() == "poli: --executor 'robot': expected 'builtin' or 'agent:NAME'"


# The agent records its report with `poli bridge report` and prints no block at all.
CLI_SCENARIO = """
[[rules]]
match = '(?s)BRIDGE TASK (?P<id>good) '
reply = "Appended the line and reported it with poli bridge report."
think_time = 3.0
[rules.write_file]
path = "f.txt"
content = "a\\nb\\nc\\n"
"""


def test_agent_reporting_with_poli_bridge_report_ends_its_turn_without_a_block(
    tmp_path: pathlib.Path,
) -> None:
    config = write_project(tmp_path, CLI_SCENARIO)

    async def agent_runs_report() -> None:
        # What the agent's shell tool does mid-turn: the prompt is in, then the report.
        async def prompted() -> bool:
            return bool((tmp_path / "agent").exists() and prompts(tmp_path / "agent"))

        await aretry_until(prompted, 60, what="the task's prompt at the agent")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "politerm",
            "bridge",
            "report",
            "good",
            "--queue",
            "bq/task_queue.json",
            "--status",
            "completed_by_agent",
            "--message",
            "appended c via the CLI",
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert out.decode() == "good completed_by_agent\n"

    async def scenario(bridge: Bridge) -> None:
        await asyncio.gather(run(bridge), agent_runs_report())

    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        bridge = make_bridge(tmp_path, store, config)
        bridge.queue.submit([TASKS[0]])
        asyncio.run(scenario(bridge))
    assert dict(bridge.finalized) == {"good": "completed"}
    assert (tmp_path / "f.txt").read_text() == "a\nb\nc\n"
    # One prompt: the agent was neither nudged for a block nor given the task twice.
    assert len(prompts(tmp_path / "agent")) == 1
    folder = archived(tmp_path, "processed", "good")
    saved = json.loads((folder / "task.json").read_text())
    assert saved["result"]["message"] == "appended c via the CLI"
    assert "reported_at" in saved
    assert (
        f"agent EDITOR answered: {TurnOutcome.ANSWERED.value}" in (folder / "task.log").read_text()
    )
