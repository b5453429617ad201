"""Crash, server kill and resume, each with its fault put at its exact moment (issue 9).

The chaos runs in test_chaos.py hit these moments by chance; here a driver hook strikes at
the moment itself: an agent's process killed right after its prompt was confirmed (the
router stopped before it could notice), the router cut off between the confirmation and
its record of it, the tmux server killed while a delivery is under way and another agent's
loop notices first, a task not yet started when the server goes. Ground truth is the fake
agents' own logs: each prompt answered once, by the process that runs after the resume.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import typing as t

import pytest

from politerm.engine.loop import abort, route, router_lock, submit, templates_for
from politerm.engine.routebase import RESUME_META, Routing
from politerm.engine.router import Router
from politerm.engine.sending import handed
from politerm.engine.session import Session
from politerm.errors import RoutingError, ServerNotRunning
from politerm.messaging.routing import run_task
from politerm.store.models import MessageState, TaskState, TurnState
from politerm.testing.retry import aretry_until
from tests.loophelpers import EXECUTER_OK, open_loop, started, write_project

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.driver import AgentDriver
    from politerm.store.models import Message
    from politerm.terminal import Snapshot
    from tests.loophelpers import Loop

pytestmark = pytest.mark.timeout(300)

TASK = 120.0  # bound on one task in these tests
# Long enough that a process killed right after its prompt was confirmed never answers it.
SLOW_EXECUTER = EXECUTER_OK.replace("think_time = 0.3", "think_time = 2.0")
PLAN_HEAD = "You received a PLANNER plan block:"


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


async def _router(loop: Loop) -> Router:
    agents = await loop.session.attach()
    return Router(Routing(loop.config, loop.store, agents, templates=templates_for(loop.config)))


async def _running(loop: Loop, task_id: str) -> Router:
    """A router (not running) over ``loop``'s agents, with task ``task_id`` started."""
    task = submit(loop.store, loop.config, "make hello", task_id=task_id)
    router = await _router(loop)
    router.executor.start_task(task)
    return router


def _lives(loop: Loop, agent: str, head: str) -> list[list[bool]]:
    """Per process life of ``agent``: whether each prompt starting with ``head`` was answered."""
    lives: list[dict[int, bool]] = []
    for event in loop.log(agent):
        if event["event"] == "start":
            lives.append({})
        elif event["event"] == "prompt" and str(event["text"]).startswith(head):
            lives[-1][int(event["n"])] = False
        elif event["event"] == "reply" and int(event["n"]) in lives[-1]:
            lives[-1][int(event["n"])] = True
    return [list(life.values()) for life in lives]


async def _kill_process(driver: AgentDriver) -> None:
    """``kill -9`` of the agent's program: its pane stays, dead (an agent crash)."""
    pid = await driver.pid()
    assert pid
    os.kill(pid, signal.SIGKILL)

    async def dead() -> bool:
        return await driver.pid() is None

    await aretry_until(dead, 60, what=f"{driver.name}'s pane to show its program dead")


def _ended(loop: Loop, task_id: str) -> bool:
    task = loop.store.get_task(task_id)
    return task is not None and task.state.is_terminal


async def _resume_and_route(loop: Loop, task_ids: t.Sequence[str]) -> None:
    """``poli up --resume`` then ``poli route`` until the tasks end (a fresh tmux client)."""
    session = Session(loop.config, loop.store)
    try:
        await session.up(resume=True, primers=False)
        async with asyncio.timeout(TASK):
            await route(
                loop.config,
                loop.store,
                until=lambda: all(_ended(loop, i) for i in task_ids),
                session=session,
            )
    finally:
        await session.host.server.close()


def _done(loop: Loop, task_id: str) -> None:
    task = loop.store.get_task(task_id)
    assert task is not None and task.state is TaskState.DONE, task


# --- an agent dies right after its prompt is confirmed; the router stops before it sees --


async def test_agent_dead_after_confirmed_delivery_gets_the_prompt_after_resume(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), executer=SLOW_EXECUTER)
    async with started(root) as loop:
        router = await _router(loop)
        executer = router.agents["EXECUTER"]
        struck = asyncio.Event()

        async def crash_then_ctrl_c() -> None:
            if not struck.is_set():
                struck.set()
                await _kill_process(executer)
                router.stop()  # the user's Ctrl-C, before any loop looked at the dead pane

        executer.on("after-confirm", crash_then_ctrl_c)
        submit(loop.store, loop.config, "make hello", task_id="T-crash")
        async with asyncio.timeout(TASK):
            await router.run()
        assert struck.is_set(), "the fault did not strike"
        turn = loop.store.current_turn("EXECUTER")
        assert turn is not None and turn.state is TurnState.WAITING  # what the resume finds
        await _resume_and_route(loop, ["T-crash"])
        _done(loop, "T-crash")
        # The dead process never answered; the restarted one got the plan once and answered.
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[False], [True]]


# --- the router is cut off between the confirmation and its record; the agent dies too ---


async def test_delivering_to_a_dead_agent_is_sent_to_the_restarted_one(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server), executer=SLOW_EXECUTER)
    async with started(root) as loop:
        router = await _router(loop)
        executer = router.agents["EXECUTER"]
        struck = asyncio.Event()

        async def crash_and_router_gone() -> None:
            if struck.is_set():
                return
            struck.set()
            await _kill_process(executer)
            router.stop()
            # The router goes now, as under kill -9: the confirmation is never written.
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)

        executer.on("after-confirm", crash_and_router_gone)
        submit(loop.store, loop.config, "make hello", task_id="T-echo")
        async with asyncio.timeout(TASK):
            await router.run()
        assert struck.is_set(), "the fault did not strike"
        [(_row, msg)] = handed(loop.store, "EXECUTER")  # in flight, by the journal
        assert msg.state is MessageState.DELIVERING
        # The dead process echoed the prompt with its nonce: the pane's history still shows
        # it after the restart, and is no evidence that the new process got anything.
        await _resume_and_route(loop, ["T-echo"])
        _done(loop, "T-echo")
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[False], [True]]


# --- the task ends around the paste: the journal row says what is still in flight ----------


async def _first_prompt(loop: Loop, task_id: str) -> tuple[Router, Message, Snapshot]:
    """A router (not running) with ``task_id`` started, its PLANNER prompt and screen."""
    router = await _running(loop, task_id)
    msg = loop.store.next_queued("PLANNER")
    snap = await router.agents["PLANNER"].snapshot()
    assert msg is not None and snap is not None
    return router, msg, snap


def _settled(loop: Loop, msg_id: int) -> bool:
    msg = loop.store.get_message(msg_id)
    return msg is not None and msg.state is not MessageState.DELIVERING


async def test_a_prompt_aborted_between_the_batch_and_the_paste_is_never_typed(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # The old recovery took a DELIVERING message without an open row for never typed, and
    # typed it: the prompt of an aborted task went to the agent after the restart.
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router, msg, snap = await _first_prompt(loop, "T-gone")
        planner = router.agents["PLANNER"]
        # What a router commits before it types anything; then it dies (kill -9).
        with loop.store.batch(durable=False):
            assert router.sending.begin(planner, msg, None, snap) is not None
        await abort(loop.config, loop.store, "T-gone")
        async with asyncio.timeout(TASK):
            await route(loop.config, loop.store, until=lambda: _settled(loop, msg.id))
        assert not [p for p in loop.prompts("PLANNER") if p.startswith("TASK_ID=T-gone")]
        dead = loop.store.get_message(msg.id)
        assert dead is not None and dead.state is MessageState.DEAD, dead
        [row] = loop.store.journal_of("messages", (msg.id,))
        assert (row.state.value, row.outcome) == ("abandoned", "task aborted")
        assert loop.store.journal_open() == []


async def test_a_handoff_aborted_before_its_loop_types_it_leaves_nothing_in_flight(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router, msg, snap = await _first_prompt(loop, "T-hand")
        router.routing.loops["PLANNER"].settled = True  # no earlier router left anything
        planner = router.agents["PLANNER"]
        # A block's commit hands the prompt to the agent's loop; the task is aborted before
        # that loop types it.
        with loop.store.batch(durable=False):
            assert router.sending.hand_off("PLANNER", msg, snap)
        begun = router.routing.loops["PLANNER"].handoff
        assert begun is not None
        await abort(loop.config, loop.store, "T-hand")
        await router.sending.send_handoff(planner, begun)
        dead = loop.store.get_message(msg.id)
        assert dead is not None and dead.state is MessageState.DEAD, dead
        assert loop.store.journal_open() == []
        assert not [p for p in loop.prompts("PLANNER") if p.startswith("TASK_ID=T-hand")]


async def test_a_prompt_aborted_while_it_is_pasted_leaves_nothing_in_flight(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # The abort ended the turn and its journal row under the delivery, whose record of the
    # outcome was then refused: the message stayed DELIVERING, the routing step failed.
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _router(loop)
        struck = asyncio.Event()

        async def abort_now() -> None:
            if not struck.is_set():
                struck.set()
                await abort(loop.config, loop.store, "T-cut")

        router.agents["PLANNER"].on("before-paste", abort_now)
        submit(loop.store, loop.config, "make hello", task_id="T-cut")
        async with asyncio.timeout(TASK):
            await router.run(until=lambda: _ended(loop, "T-cut"))
        assert struck.is_set(), "the fault did not strike"
        [msg] = loop.store.list_messages(task_id="T-cut")
        assert msg.state is MessageState.ACKNOWLEDGED, msg
        [row] = loop.store.journal_of("messages", (msg.id,))
        assert (row.state.value, row.outcome) == ("ended", "task_ended"), row
        assert loop.store.journal_open() == [] and loop.store.current_turn("PLANNER") is None
        assert not [e for e in loop.store.list_events(limit=500) if e.kind == "error"]


# --- the tmux server dies mid-delivery and another agent's loop notices first -----------


async def test_server_killed_mid_delivery_sends_the_prompt_once_after_resume(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _router(loop)
        executer = router.agents["EXECUTER"]
        struck = asyncio.Event()

        async def kill_server() -> None:
            if struck.is_set():
                return
            struck.set()
            tmux = await asyncio.create_subprocess_exec(
                "tmux", "-L", _socket(server), "kill-server",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await tmux.wait()

            # PLANNER's loop notices first and fails the task, this delivery still under way.
            async def noticed() -> bool:
                return router.fatal is not None

            await aretry_until(noticed, 60, what="the router to notice the server is gone")

        executer.on("before-paste", kill_server)
        submit(loop.store, loop.config, "make hello", task_id="T-srv")
        with pytest.raises(ServerNotRunning):
            async with asyncio.timeout(TASK):
                await router.run()
        assert struck.is_set(), "the fault did not strike"
        failed = loop.store.get_task("T-srv")
        assert failed is not None and failed.state is TaskState.FAILED
        assert "poli up --resume" in (failed.error or "")
        await _resume_and_route(loop, ["T-srv"])
        _done(loop, "T-srv")
        # The first server's EXECUTER never got the plan; the new one got it once.
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[], [True]]


# --- a task not started yet when the server dies is not lost ----------------------------


async def test_task_not_started_when_the_server_dies_runs_after_resume(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _running(loop, "T-run")
        submit(loop.store, loop.config, "make hello", task_id="T-later")  # still PENDING
        # The exact moment: a loop has just found the server gone.
        router.executor.server_gone("server exited unexpectedly")
        later = loop.store.get_task("T-later")
        assert later is not None and later.state is TaskState.PENDING, later
        first = loop.store.get_task("T-run")
        assert first is not None and first.state is TaskState.FAILED
        assert loop.store.get_meta(f"{RESUME_META}T-run") == TaskState.PLANNING.value
        await _resume_and_route(loop, ["T-run", "T-later"])
        _done(loop, "T-run")
        _done(loop, "T-later")


# --- two routers with different stores cannot drive one tmux session --------------------


async def test_two_routers_on_different_stores_cannot_drive_one_session(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    other = tmp_path / "other"
    # The same agents and tmux session, another store.
    write_project(other, _socket(server))
    toml = (other / "poli.toml").read_text()
    (other / "poli.toml").write_text(toml.replace('path = "runs.sqlite3"', 'path = "b.sqlite3"'))
    async with started(root) as loop:
        routing = asyncio.create_task(route(loop.config, loop.store))
        try:

            async def holding() -> bool:
                return router_lock(loop.config).holder() == os.getpid()

            await aretry_until(holding, 60, what="the first router to hold the session's lock")
            second = open_loop(other)
            try:
                assert second.store.path != loop.store.path
                submit(second.store, second.config, "make hello", task_id="T-b")
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "politerm", "route", "--until-idle",
                    cwd=other, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                async with asyncio.timeout(60):
                    out, _ = await proc.communicate()
                assert proc.returncode == 1, out
                text = out.decode()
                assert f"another router (pid {os.getpid()}) is routing session 't'" in text, text
                task = second.store.get_task("T-b")
                assert task is not None and task.state is TaskState.PENDING  # nothing sent
                assert second.store.list_messages() == []
            finally:
                second.store.close()
        finally:
            routing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await routing
        assert not any("T-b" in p for p in loop.prompts("PLANNER"))


# --- a resume never races a running router ----------------------------------------------


async def test_resume_is_refused_while_a_router_routes_the_session(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _router(loop)
        executer = router.agents["EXECUTER"]
        await _kill_process(executer)
        routing = asyncio.create_task(route(loop.config, loop.store))
        try:

            async def holding() -> bool:
                return router_lock(loop.config).holder() == os.getpid()

            await aretry_until(holding, 60, what="the router to hold the session's lock")
            session = Session(loop.config, loop.store)
            try:
                with pytest.raises(RoutingError, match=r"stop it \(Ctrl-C\) before"):
                    await session.up(resume=True, primers=False)
            finally:
                await session.host.server.close()
            assert await executer.pid() is None  # nothing was restarted
        finally:
            routing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await routing


# --- work queued to an agent that already died, the router left running ------------------


async def test_work_for_a_dead_agent_fails_resumably_then_runs_after_resume(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _router(loop)
        await _kill_process(router.agents["EXECUTER"])
        # The EXECUTER is dead before its plan is even queued: the step's clock (which runs
        # from confirmed delivery) would never start.
        task = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert task.state is TaskState.FAILED, task
        assert "exited before it got its prompt" in (task.error or ""), task.error
        await _resume_and_route(loop, [task.id])
        _done(loop, task.id)
        assert _lives(loop, "EXECUTER", PLAN_HEAD) == [[], [True]]


# --- an answer on screen when the router stops, then the server dies before any router ---


async def test_answer_on_screen_at_a_stop_is_read_before_the_router_exits(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    write_project(root, _socket(server))
    async with started(root) as loop:
        router = await _router(loop)
        planner = router.agents["PLANNER"]
        delivered = 0

        async def answered_then_ctrl_c() -> None:
            nonlocal delivered
            delivered += 1
            if delivered != 2:  # the task, then the EXECUTER's result
                return

            async def final_on_screen() -> bool:
                snap = await planner.snapshot()
                shown = snap is not None and any("All done" in ln for ln in snap.lines)
                return shown and len(loop.replies("PLANNER")) == 2

            await aretry_until(final_on_screen, 60, what="the PLANNER to print its final block")
            router.stop()  # the user's Ctrl-C before the PLANNER's loop read the answer

        planner.on("after-confirm", answered_then_ctrl_c)
        submit(loop.store, loop.config, "make hello", task_id="T-last")
        async with asyncio.timeout(TASK):
            await router.run()
        assert delivered == 2, "the fault did not strike"
        _done(loop, "T-last")
        # The server dies before any other router looked: nothing is left to send again.
        tmux = await asyncio.create_subprocess_exec("tmux", "-L", _socket(server), "kill-server")
        await tmux.wait()
        await _resume_and_route(loop, ["T-last"])
        assert _lives(loop, "PLANNER", "EXECUTER replied:") == [[True], []]
