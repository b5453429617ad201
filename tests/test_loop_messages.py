"""What the Planner⇄Executer loop says when blocks go wrong: each message names the real cause.

Real tmux, the fake agents, a real store (issue 23's "messages that mislead").
"""

from __future__ import annotations

import logging
import typing as t

import pytest

from politerm.engine.router import LAST_LOOK
from politerm.errors import RoutingError
from politerm.messaging.routing import run_task
from politerm.store.models import TaskState
from tests.loophelpers import (
    EXECUTER_OK,
    IDS,
    PLANNER_HEAD,
    PLANNER_OK,
    RESULT,
    block,
    rule,
    started,
    write_project,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "proj"


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


async def test_a_plan_the_planner_addresses_to_itself_is_named_and_the_timeout_lists_it(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    planner = PLANNER_HEAD + rule(r"\A(?=TASK_ID=)", block("PLANNER", "plan", "1. Do it."))
    write_project(project, _socket(server), planner=planner, plan_timeout=2)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "to myself", timeout=30)
        assert task.state is TaskState.FAILED
        assert task.error is not None
        events = loop.store.list_events(task_id=task.id, limit=200)
        (refused,) = [e.detail for e in events if e.kind == "rejected"]
        why = "PLANNER addressed its plan block to itself; a plan block goes to EXECUTER"
        assert refused == f"block to 'PLANNER': {why}"
        assert "no such agent" not in refused
        # every block it sent was refused: the timeout says so, not "no block was rejected"
        assert "PLANNER sent no plan block" in task.error
        assert f"rejected blocks: block to 'PLANNER': {why}" in task.error
        assert "no block was rejected" not in task.error


async def test_a_block_to_nobody_names_the_agents_there_are(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    planner = PLANNER_HEAD + rule(r"\A(?=TASK_ID=)", block("EXECUTOR", "plan", "1. Do it."))
    write_project(project, _socket(server), planner=planner, plan_timeout=2)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "typo", timeout=30)
        assert task.state is TaskState.FAILED
        events = loop.store.list_events(task_id=task.id, limit=200)
        (refused,) = [e.detail for e in events if e.kind == "rejected"]
        assert refused == (
            "block to 'EXECUTOR': no agent is named 'EXECUTOR' (agents: PLANNER, EXECUTER; "
            "USER); a plan block goes to EXECUTER"
        )


async def test_an_old_block_is_ignored_as_it_should_be_not_rejected(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # the executer shows an earlier turn's block (another nonce) before its answer
    old = (
        'Earlier:\n\n[[POLI:MSG {"to":"PLANNER","type":"result","id":"{id}","nonce":"470519"}]]'
        "\n<RESULT>\nstale\n</RESULT>\n[[/POLI:MSG]]\n\n"
    )
    executer = EXECUTER_OK.replace("reply = '''", "reply = '''" + old, 1)
    assert old in executer and RESULT in executer
    write_project(project, _socket(server), planner=PLANNER_OK, executer=executer)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "old block", timeout=60)
        assert task.state is TaskState.DONE, task.error
        events = loop.store.list_events(task_id=task.id, limit=200)
        assert not [e for e in events if e.kind == "rejected"]
        (ignored,) = [e.detail for e in events if e.kind == "ignored"]
        assert "an old block, ignored as it should be" in ignored
        assert "its nonce '470519' is not this turn's" in ignored


async def test_a_timeout_after_only_old_blocks_says_none_was_rejected_and_they_were_ignored(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    old = (
        'Earlier:\n\n[[POLI:MSG {"to":"PLANNER","type":"result","id":"{id}","nonce":"470519"}]]'
        "\n<RESULT>\nstale\n</RESULT>\n[[/POLI:MSG]]\n"
    )
    executer = f"mode = \"codex\"\nthink_time = 0.3\n\n[[rules]]\nmatch = '(?s)\\A{IDS}'\n"
    executer += f"reply = '''{old}'''\n"
    write_project(project, _socket(server), executer=executer, exec_timeout=2)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "only old", timeout=60)
        assert task.state is TaskState.FAILED
        assert task.error is not None
        assert "EXECUTER sent no result block" in task.error
        assert "no block was rejected (" in task.error
        assert "ignored, as they should be)" in task.error


async def test_a_last_look_that_times_out_says_why(
    server: libtmux.Server, project: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    # EXECUTER prints its result, then asks to run a command nobody answers (approval
    # "ask"): the block waits for it to be idle when `poli task`'s own timeout stops routing
    result = block("PLANNER", "result", "Ran it.", tag="RESULT")
    executer = (
        'mode = "codex"\nthink_time = 0.3\n\n'
        "[[rules]]\n"
        f"match = '(?s)\\AYou received a PLANNER plan block:{IDS}'\n"
        'approval = "echo hi > ran.txt"\napproval_after_reply = true\n'
        f"reply = '''{result}'''\n"
    )
    write_project(
        project, _socket(server), executer=executer, extra='[routing]\napproval = "ask"\n'
    )
    async with started(project) as loop:
        caplog.set_level(logging.WARNING, logger="politerm.engine.router")
        with pytest.raises(RoutingError, match="not finished within"):
            await run_task(loop.config, loop.store, "ask me", timeout=6)
        (said,) = [
            r.getMessage() for r in caplog.records if "no last look at its turn" in r.getMessage()
        ]
        reason = said.split("no last look at its turn: ", 1)[1]
        assert reason.startswith("its block takes effect once it is idle, and it was still "), said
        assert "waiting approval (echo hi > ran.txt)" in reason, said
        assert reason.endswith(f"after {LAST_LOOK:g}s; the next router reads the turn again")
