"""A resume reads the dead agent's own records before it sends anything again (issue 9, 10).

The long fault run's one duplicate (the mixed row, seed 10): an answer printed after the
last router stopped reading, then the agent or the tmux server gone before any router read
it. The screen went with it; the agent's transcript and its hook receipts did not. Each
test strikes at that moment with a driver hook, then resumes: the answer is read back from
the transcript and routed on once, a delivery the agent's hook recorded is DELIVERED by
hook, and the fake agents' own logs show that no prompt was submitted twice.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import typing as t

import pytest

from politerm.engine.loop import route, submit
from politerm.engine.sending import handed
from politerm.hooks.channel import create_channel, hooks_dir_for
from politerm.store.journal import JournalState
from politerm.store.models import MessageState, TaskState, TurnState
from politerm.testing.chaos.project import TRANSCRIPT
from politerm.testing.retry import aretry_until
from tests.faults.test_resume_moments import (
    PLAN_HEAD,
    TASK,
    _done,
    _kill_process,
    _lives,
    _resume_and_route,
    _router,
    _socket,
)
from tests.loophelpers import PLANNER_OK, started, write_project
from tests.test_receipts_drift import Mirror

if t.TYPE_CHECKING:
    import libtmux

    from tests.loophelpers import Loop

pytestmark = pytest.mark.timeout(300)

RESULT_HEAD = "EXECUTER replied:"
# The PLANNER still works on the result when the stopping router takes its last look.
SLOW_PLANNER = PLANNER_OK.replace("think_time = 0.3", "think_time = 2.0")
FINAL_REPORT = "All done: the executer reported success."


def _answered_in_transcript(loop: Loop, agent: str, text: str) -> bool:
    """Whether ``agent``'s transcript holds an assistant line containing ``text``."""
    path = loop.root / agent.lower() / TRANSCRIPT
    if not path.exists():
        return False
    for line in path.read_text("utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "assistant" and text in json.dumps(record["message"]):
            return True
    return False


async def _answered(loop: Loop, agent: str, head: str, text: str) -> None:
    """Wait until ``agent`` answered its prompt starting with ``head`` (log and transcript)."""

    async def done() -> bool:
        lives = _lives(loop, agent, head)
        return bool(lives) and lives[-1] == [True] and _answered_in_transcript(loop, agent, text)

    await aretry_until(done, 60, what=f"{agent} to answer and write it to its transcript")


async def _kill_server(server: libtmux.Server) -> None:
    """``tmux kill-server``, then wait until the server process is gone.

    A ``new-session`` sent while the old server is still exiting fails with "server exited
    unexpectedly": the resume must find no server at all.
    """
    [pid] = server.cmd("display-message", "-p", "#{pid}").stdout
    tmux = await asyncio.create_subprocess_exec(
        "tmux", "-L", _socket(server), "kill-server",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await tmux.wait()
    status = pathlib.Path(f"/proc/{pid}/status")

    async def gone() -> bool:
        try:
            return "\nState:\tZ" in status.read_text()  # exited, not reaped yet
        except OSError:
            return True

    await aretry_until(gone, 60, what=f"the tmux server (pid {pid}) to exit")


async def _result_answered_after_the_last_look(loop: Loop) -> None:
    """Route T-late until the PLANNER has the result; stop the router before it answers.

    The PLANNER is still working at the router's last look, and prints its final block
    after the router returned: only its screen and its transcript hold the answer.
    """
    router = await _router(loop)
    planner = router.agents["PLANNER"]
    delivered = 0

    async def ctrl_c_at_the_result() -> None:
        nonlocal delivered
        delivered += 1
        if delivered == 2:  # the task, then the EXECUTER's result
            router.stop()  # the user's Ctrl-C while the PLANNER works on it

    planner.on("after-confirm", ctrl_c_at_the_result)
    submit_task(loop, "T-late")
    async with asyncio.timeout(TASK):
        await router.run()
    assert delivered == 2, "the fault did not strike"
    turn = loop.store.current_turn("PLANNER")
    assert turn is not None and turn.state is TurnState.WAITING, turn  # read by no router
    task = loop.store.get_task("T-late")
    assert task is not None and task.state is TaskState.PLANNING, task
    await _answered(loop, "PLANNER", RESULT_HEAD, FINAL_REPORT)


def submit_task(loop: Loop, task_id: str) -> None:
    submit(loop.store, loop.config, "make hello", task_id=task_id)


def _report(loop: Loop, task_id: str) -> str:
    task = loop.store.get_task(task_id)
    assert task is not None and task.state is TaskState.DONE, task
    return task.report or ""


# --- the answer printed after the last look; then the agent is killed -------------------


async def test_answer_after_the_last_look_then_agent_killed_is_read_from_its_transcript(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), planner=SLOW_PLANNER, transcripts=True)
    async with started(root) as loop:
        await _result_answered_after_the_last_look(loop)
        router = await _router(loop)
        await _kill_process(router.agents["PLANNER"])  # its screen goes with it
        await _resume_and_route(loop, ["T-late"])
        assert FINAL_REPORT in _report(loop, "T-late")
        # The PLANNER answered the result once; the restarted one never got it again.
        assert _lives(loop, "PLANNER", RESULT_HEAD) == [[True], []]
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[True]]


# --- the same answer; then the tmux server is killed -------------------------------------


async def test_answer_after_the_last_look_then_server_killed_is_read_from_its_transcript(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), planner=SLOW_PLANNER, transcripts=True)
    async with started(root) as loop:
        await _result_answered_after_the_last_look(loop)
        await _kill_server(server)
        await _resume_and_route(loop, ["T-late"])
        assert FINAL_REPORT in _report(loop, "T-late")
        assert _lives(loop, "PLANNER", RESULT_HEAD) == [[True], []]
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[True], []]


# --- DELIVERING, the agent's prompt receipt kept; then the tmux server is killed ---------


async def test_delivering_with_a_kept_prompt_receipt_is_delivered_by_hook_at_resume(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), transcripts=True)
    async with started(root) as loop:
        # The EXECUTER's hooks report to the session's channel, as a hooked CLI's do.
        channel = create_channel(hooks_dir_for(loop.config), "EXECUTER")
        async with Mirror(root / "executer.jsonl", channel):
            router = await _router(loop)
            executer = router.agents["EXECUTER"]
            struck = asyncio.Event()

            async def router_gone() -> None:
                if struck.is_set():
                    return
                struck.set()
                router.stop()
                # The router goes now, as under kill -9: the confirmation is never written.
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)

            executer.on("after-confirm", router_gone)
            submit_task(loop, "T-hook")
            async with asyncio.timeout(TASK):
                await router.run()
            assert struck.is_set(), "the fault did not strike"
            [(row, msg)] = handed(loop.store, "EXECUTER")  # in flight, by the journal
            assert msg.state is MessageState.DELIVERING
            await _answered(loop, "EXECUTER", PLAN_HEAD, "Created hello.txt.")

            async def receipt_kept() -> bool:
                return "UserPromptSubmit" in channel.read_text("utf-8")

            await aretry_until(receipt_kept, 60, what="the EXECUTER's prompt receipt")
        await _kill_server(server)
        await _resume_and_route(loop, ["T-hook"])
        _done(loop, "T-hook")
        plan = loop.store.get_message(msg.id)
        assert plan is not None and plan.state is MessageState.ACKNOWLEDGED, plan
        assert "hook UserPromptSubmit accepted the prompt" in (plan.evidence or ""), plan
        # Its journal row says the same: delivered (by the hook), ended with that process.
        settled = loop.store.journal_row(row.id)
        assert settled is not None and settled.state is JournalState.ENDED, settled
        assert settled.proof.get("sources") == ["hook"], settled
        events = loop.store.list_events("T-hook", limit=1000)
        recovered = [e.detail for e in events if e.kind == "recovered"]
        assert any("confirmed by hook" in d for d in recovered), recovered
        # The EXECUTER answered the plan once; the restarted one never got it again.
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[True], []]
        assert _lives(loop, "PLANNER", RESULT_HEAD) == [[], [True]]


# --- the same answer; the agent killed, and a router fails the task before the resume ----


async def test_answer_of_an_agent_a_router_saw_die_is_read_from_its_transcript(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), planner=SLOW_PLANNER, transcripts=True)
    async with started(root) as loop:
        await _result_answered_after_the_last_look(loop)
        router = await _router(loop)
        await _kill_process(router.agents["PLANNER"])

        def failed() -> bool:
            task = loop.store.get_task("T-late")
            return task is not None and task.state is TaskState.FAILED

        # This router reads the dead pane, not the answer: the task fails, resumably.
        async with asyncio.timeout(TASK):
            await route(loop.config, loop.store, until=failed)
        task = loop.store.get_task("T-late")
        assert task is not None and "poli up --resume" in (task.error or ""), task
        assert loop.store.current_turn("PLANNER") is None
        await _resume_and_route(loop, ["T-late"])
        assert FINAL_REPORT in _report(loop, "T-late")
        assert _lives(loop, "PLANNER", RESULT_HEAD) == [[True], []]
