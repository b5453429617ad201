"""The original PoliTerm's contract: programs written for it round-trip with
``[routing] contract = "poliseed"`` through ``poli up``/``task``/``down`` and PoliTerm's own
environment variables; the default contract accepts a block whose nonce was
dropped (with a warning), records status blocks with their own ids, and names rejected blocks
when a step times out. Real tmux, real programs, a real store."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import typing as t

import pytest

from politerm.config import load_config
from politerm.engine.templates import Templates
from politerm.messaging.routing import run_task
from politerm.protocol.parser import parse_blocks
from politerm.store import RunStore
from politerm.store.models import TaskState
from tests.loophelpers import (
    EXECUTER_HEAD,
    IDS,
    PLANNER_HEAD,
    PLANNER_OK,
    RESULT,
    rule,
    started,
    write_project,
)

if t.TYPE_CHECKING:
    import libtmux

SEED = pathlib.Path(__file__).parent / "fixtures" / "poliseed"


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "proj"


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


def seed_project(root: pathlib.Path, socket: str) -> dict[str, str]:
    """Two programs written for the original contract, set up the original's way.

    The commands, directories, tmux names and timeouts come from PoliTerm's own environment
    variables (its config/poli.env). Returns the environment to run ``poli`` in.
    """
    root.mkdir(parents=True)
    # The one line of configuration; nothing else is in poli.toml (so the generic profile
    # tells ready from busy by the screen settling: slower than a ready_regex, as a user
    # would first run it).
    (root / "poli.toml").write_text('[routing]\ncontract = "poliseed"\n')
    env = {**os.environ, "COLUMNS": "200"}
    for name in ("planner", "executer"):
        (root / name).mkdir()
        argv = [sys.executable, str(SEED / f"{name}.py"), str(root / f"{name}.jsonl")]
        env[f"{name.upper()}_CMD"] = shlex.join(argv)
        env[f"{name.upper()}_CWD"] = name
    env |= {
        "POLI_TMUX_SOCKET": socket,
        "POLI_TMUX_SESSION": "main",
        "POLI_PLAN_TIMEOUT": "30",
        "POLI_EXEC_TIMEOUT": "30",
    }
    return env


def poli(root: pathlib.Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def lines_of(root: pathlib.Path, name: str) -> list[dict[str, str]]:
    path = root / f"{name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_poliseed_programs_round_trip_with_the_preset(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # As a PoliTerm user would: bootstrap_tmux.sh -> poli up, the orchestrator's one smoke
    # route -> poli task, kill_tmux.sh -> poli down; the environment variables as they were.
    env = seed_project(project, _socket(server))
    up = poli(project, env, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "PLANNER: primer delivered" in up.stdout
    try:
        routed = poli(project, env, "task", "Create hello.txt", "--id", "seed-1")
    finally:
        down = poli(project, env, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert routed.returncode == 0, routed.stdout + routed.stderr
    assert "SEED-REPORT hello.txt was created and verified." in routed.stdout
    config = load_config(project, env=env)
    assert config.agents["PLANNER"].profile == "generic"
    with RunStore.open(config.store.resolved_path()) as store:
        task = store.get_task("seed-1")
        assert task is not None
        events = store.list_events(task_id=task.id, limit=200)
        blocks = store.list_blocks(task.id)
    assert task.state is TaskState.DONE, (task.error, [(e.kind, e.detail) for e in events])
    assert task.report is not None
    assert "SEED-REPORT hello.txt was created and verified." in task.report
    assert "EXECUTER replied" not in task.report  # the echoed prompt is not the report
    # The program's input prompt (a REPL's "planner> ") is not part of the report.
    assert task.report == "Summary for the user: SEED-REPORT hello.txt was created and verified."
    assert (project / "executer" / "hello.txt").read_text() == "Hello, PoliTerm!\n"
    # The programs heard the original's sentences and parsed what they needed.
    planner = lines_of(project, "planner")
    assert [e["text"] for e in planner if e["event"] == "request"] == ["Create hello.txt"]
    said = "\n".join(e["text"] for e in planner)
    ask = f"Please produce exactly one tagged block addressed to EXECUTER with id={task.id}."
    assert ask in said
    assert "Now produce a concise final report for the user (no new POLI blocks)." in said
    executer = lines_of(project, "executer")
    assert [e["text"] for e in executer if e["event"] == "plan"] == [
        "Step 1: Create hello.txt\nStep 2: Verify it"
    ]
    heard = "\n".join(e["text"] for e in executer)
    assert "You received a PLANNER plan block:" in heard
    assert f"When done, emit a RESULT block back to PLANNER with id={task.id}." in heard
    # Status blocks with their own ids are recorded for the task; nothing was rejected.
    status = sorted(b.msg_id or "" for b in blocks if b.type == "status" and b.accepted)
    assert status == [f"{task.id}-status-1", f"{task.id}-status-2"]
    assert not [e for e in events if e.kind == "rejected"], [e.detail for e in events]
    # The forwarded block inside each prompt was never read back as the agent's own.
    assert [b.type for b in blocks if b.accepted and b.type != "status"] == ["plan", "result"]


def test_preset_prompts_use_the_originals_wording_and_never_print_a_placeholder() -> None:
    t = Templates(contract="poliseed")
    task = t.render("task", msg_id="T9", nonce="abc123", request="Say hi")
    assert task.splitlines()[0] == "TASK_ID=T9"
    assert task.endswith(
        "Please produce exactly one tagged block addressed to EXECUTER with id=T9."
    )
    plan = t.render("plan", msg_id="T9", nonce="abc123", body="Step 1: x")
    assert plan.startswith("You received a PLANNER plan block:")
    assert plan.endswith(
        "Execute the plan. When done, emit a RESULT block back to PLANNER with id=T9."
    )
    result = t.render("result", msg_id="T9", nonce="abc123", body="done")
    assert result.endswith("(no new POLI blocks).")
    for text in (task, plan, result):
        assert "abc123" not in text and "<TO>" not in text and "<NONCE>" not in text
    # The forwarded block is complete (a program reads it) and, after it, no block header.
    for text, kind in ((plan, "plan"), (result, "result")):
        assert [b.type for b in parse_blocks(text).blocks] == [kind]
        assert "[[POLI:MSG" not in text.split("[[/POLI:MSG]]", 1)[1]


def _nonceless(to: str, typ: str, tag: str, body: str, block_id: str = "{id}") -> str:
    header = json.dumps({"to": to, "type": typ, "id": block_id})
    return f"Done.\n\n[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n[[/POLI:MSG]]\n"


async def test_default_contract_accepts_a_dropped_nonce_with_a_warning(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # A claude-like executer: the normal screen, where the turn's start line is known.
    reply = _nonceless("PLANNER", "result", "RESULT", "Created hello.txt without a nonce.")
    executer = PLANNER_HEAD + rule(r"\AYou received a PLANNER plan block:", reply)
    write_project(project, _socket(server), executer=executer, executer_mode="claude")
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "drop the nonce", timeout=60)
        events = loop.store.list_events(task_id=task.id, limit=200)
        assert task.state is TaskState.DONE, (task.error, [(e.kind, e.detail) for e in events])
        warnings = [e.detail for e in events if e.kind == "warning"]
        assert warnings == [
            (
                f"accepted a result block without a nonce: it follows the turn's prompt and "
                f"carries task id {task.id}"
            )
        ]
        assert not [e for e in events if e.kind == "rejected" and "no nonce" in e.detail]
        assert "without a nonce" in loop.prompts("PLANNER")[1]


async def test_status_blocks_with_their_own_ids_are_recorded(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    status = (
        'Working.\n\n[[POLI:MSG {"to":"PLANNER","type":"status","id":"{id}-status-1",'
        '"nonce":"{nonce}"}]]\n<STATUS>\nhalfway\n</STATUS>\n[[/POLI:MSG]]\n'
    )
    executer = EXECUTER_HEAD + rule(r"\AYou received", status + "\n" + RESULT)
    write_project(project, _socket(server), executer=executer)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "status ids", timeout=60)
        assert task.state is TaskState.DONE, task.error
        recorded = [b for b in loop.store.list_blocks(task.id) if b.type == "status"]
        assert [(b.msg_id, b.accepted) for b in recorded] == [(f"{task.id}-status-1", True)]
        events = loop.store.list_events(task_id=task.id, limit=200)
        assert not [e for e in events if e.kind == "rejected"]


async def test_timeout_names_the_rejected_blocks(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # A wrong nonce, and no nonce on a block of another task: neither is accepted.
    wrong = (
        'Here.\n\n[[POLI:MSG {"to":"PLANNER","type":"result","id":"{id}","nonce":"0badc0"}]]'
        "\n<RESULT>\nstale\n</RESULT>\n[[/POLI:MSG]]\n"
    ) + _nonceless("PLANNER", "result", "RESULT", "not this task's", block_id="T-other")
    executer = EXECUTER_HEAD + f"[[rules]]\nmatch = '(?s)\\A{IDS}'\nreply = '''{wrong}'''\n"
    write_project(project, _socket(server), planner=PLANNER_OK, executer=executer,
                  exec_timeout=2)  # fmt: skip
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "wrong nonce", timeout=60)
        assert task.state is TaskState.FAILED
        assert task.error is not None
        assert "EXECUTER sent no result block" in task.error
        assert "rejected blocks: line " in task.error
        assert "header has no nonce" in task.error
        # the wrong nonce is an old block's: ignored as it should be, counted apart
        assert "old block of an earlier turn ignored" in task.error
        events = loop.store.list_events(task_id=task.id, limit=200)
        assert any(
            e.kind == "ignored" and "its nonce '0badc0' is not this turn's" in e.detail
            for e in events
        )
        events = loop.store.list_events(task_id=task.id, limit=200)
        assert not [e for e in events if e.kind == "warning" and "without a nonce" in e.detail]
