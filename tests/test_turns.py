"""One regression test per failure of issue 9, each with its fault at the exact moment.

The faults are put where they strike: a store left exactly as a ``kill -9`` leaves it at
that point (a router's own writes, nothing typed), a driver hook that widens a window, a
fake agent that loses an Enter, leaves text in its box, dies mid-delivery or asks after
its answer. Ground truth is the fake agents' own input logs.
"""

from __future__ import annotations

import asyncio
import typing as t

import pytest

from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.engine.loop import abort, route, submit, templates_for
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.engine.sending import handed
from politerm.engine.session import RouterLock
from politerm.errors import IdError, TransitionRejected
from politerm.messaging.routing import run_task
from politerm.status import collect
from politerm.store import RunStore
from politerm.store.models import MessageState, TaskState, TurnEnd, TurnState
from politerm.store.turns import MESSAGE_TRANSITIONS, TURN_TRANSITIONS, turn_step
from politerm.testing.retry import aretry_until
from tests.loophelpers import (
    EXECUTER_OK,
    FINAL,
    IDS,
    PLAN,
    PLANNER_HEAD,
    block,
    rule,
    started,
    write_project,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from tests.loophelpers import Loop

TASK = 90.0  # bound on one task in these tests


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "proj"


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


async def _router(loop: Loop) -> Router:
    agents = await loop.session.attach()
    return Router(Routing(loop.config, loop.store, agents, templates=templates_for(loop.config)))


def _planner_ok(extra: str = "") -> str:
    return (
        PLANNER_HEAD
        + rule(r"\A\s*EXECUTER replied:", FINAL)
        + extra
        + rule(r"\A(?=TASK_ID=)", PLAN)
    )


# --- the state machine itself -----------------------------------------------------------


def test_every_turn_transition_is_either_allowed_or_rejected() -> None:
    states: list[TurnState | None] = [None, *TurnState]
    for old in states:
        for new in TurnState:
            if new in TURN_TRANSITIONS[old]:
                assert turn_step("t", old, new) is new
            else:
                with pytest.raises(TransitionRejected):
                    turn_step("t", old, new)
    assert set(MESSAGE_TRANSITIONS) == set(MessageState)


# --- 1. a task failed on its timeout leaves its agent's turn open ----------------------


async def test_timed_out_task_frees_its_agent_for_the_next_one(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    planner = (
        PLANNER_HEAD
        + rule(r"\A(?=TASK_ID=)(?=.*stall)", "Thinking, no block.")
        + (rule(r"\A\s*EXECUTER replied:", FINAL) + rule(r"\A(?=TASK_ID=)", PLAN))
    )
    write_project(project, _socket(server), planner=planner, plan_timeout=2)
    async with started(project) as loop:
        first = await run_task(loop.config, loop.store, "stall please", timeout=TASK)
        assert first.state is TaskState.FAILED
        assert loop.store.current_turn("PLANNER") is None  # the turn ended with the task
        second = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert second.state is TaskState.DONE, second.error
        assert second.report and "All done" in second.report


# --- 2. a router killed after its batch (DELIVERING, turn, journal row), before the paste


async def test_a_prompt_begun_before_the_paste_is_in_flight_and_sent_after_a_restart(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    write_project(project, _socket(server))
    async with started(project) as loop:
        task = submit(loop.store, loop.config, "make hello", task_id="T-dlv")
        router = await _router(loop)
        router.executor.start_task(task)
        # Exactly what a router commits before it types anything, and then dies (kill -9).
        msg = loop.store.next_queued("PLANNER")
        assert msg is not None
        planner = router.agents["PLANNER"]
        snap = await planner.snapshot()
        assert snap is not None
        with loop.store.batch(durable=False):
            begun = router.sending.begin(planner, msg, None, snap)
        assert begun is not None
        # The prompt is in flight by the journal of turns, which `poli status` shows.
        [row] = collect(loop.store, events=0)["turns"]
        assert (row["record_key"], row["state"], row["nonce"]) == ([msg.id], "handed", begun.nonce)
        assert [m.id for _row, m in handed(loop.store, "PLANNER")] == [msg.id]
        await route(loop.config, loop.store, until=lambda: _ended(loop, "T-dlv"))
        done = loop.store.get_task("T-dlv")
        assert done is not None and done.state is TaskState.DONE, done
        prompts = loop.prompts("PLANNER")
        assert len([p for p in prompts if p.startswith("TASK_ID=T-dlv")]) == 1  # sent, and once
        # the recovery went on in the dead router's row: one row for the one prompt
        (kept,) = loop.store.journal_of("messages", (msg.id,))
        assert (kept.id, kept.state.value, kept.outcome) == (row["id"], "ended", "answered")


def _ended(loop: Loop, task_id: str) -> bool:
    task = loop.store.get_task(task_id)
    return task is not None and task.state.is_terminal


# --- 3. a router that exits normally leaves DELIVERING behind ---------------------------


async def test_a_stopping_router_finishes_the_delivery_under_way(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # A slow answer: the stopping router's last look finds the turn still unanswered.
    write_project(project, _socket(server), planner=_planner_ok().replace("0.3", "30.0"))
    async with started(project) as loop:
        router = await _router(loop)
        pasting = asyncio.Event()

        async def slow_paste() -> None:
            pasting.set()
            await asyncio.sleep(1.0)  # widen the window: the router is told to stop now

        router.agents["PLANNER"].on("before-paste", slow_paste)
        submit(loop.store, loop.config, "make hello", task_id="T-stop")
        async with asyncio.timeout(TASK):
            await router.run(until=pasting.is_set)
        assert handed(loop.store, "PLANNER") == []
        [msg] = loop.store.list_messages(task_id="T-stop")
        assert msg.state is MessageState.DELIVERED
        turn = loop.store.current_turn("PLANNER")
        assert turn is not None and turn.state is TurnState.WAITING
        assert len(loop.prompts("PLANNER")) == 1


# --- 4. recovery presses Enter once and records DELIVERED without confirming -----------


async def test_recovered_text_in_the_box_is_submitted_and_confirmed(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    planner = _planner_ok().replace(
        "think_time = 0.3\n", "think_time = 0.3\nswallow_first_enter_after_paste = true\n"
    )
    write_project(project, _socket(server), planner=planner)
    async with started(project) as loop:
        task = submit(loop.store, loop.config, "make hello", task_id="T-box")
        router = await _router(loop)
        router.executor.start_task(task)
        msg = loop.store.next_queued("PLANNER")
        assert msg is not None
        planner_driver = router.agents["PLANNER"]
        snap = await planner_driver.snapshot()
        assert snap is not None
        with loop.store.batch(durable=False):
            begun = router.sending.begin(planner_driver, msg, None, snap)
        assert begun is not None
        text = begun.text
        # The dead router had pasted; its Enter never came. The agent swallows the next one.
        pane = await loop.session.host.pane(planner_driver.terminal_name)
        assert pane is not None
        await pane.paste(text.encode())

        async def in_box() -> bool:
            s = await planner_driver.snapshot()
            return s is not None and bool(planner_driver.profile.input_text(s))

        await aretry_until(in_box, 60, what="the pasted prompt to show in the input box")
        await route(loop.config, loop.store, until=lambda: _ended(loop, "T-box"))
        done = loop.store.get_task("T-box")
        assert done is not None and done.state is TaskState.DONE, done
        swallowed = [e for e in loop.log("PLANNER") if e["event"] == "swallowed_enter"]
        assert swallowed, "the fault did not strike"
        assert len([p for p in loop.prompts("PLANNER") if p.startswith("TASK_ID=T-box")]) == 1
        # the recovery went on in the dead router's row: one row for the one prompt
        (row,) = loop.store.journal_of("messages", (msg.id,))
        assert (row.state.value, row.outcome, row.attempt) == ("ended", "answered", 1)
        assert row.proof["submits"] >= 1 and row.delivered is not None


# --- 5. a paste onto text already in the box --------------------------------------------


async def test_text_left_in_the_box_never_joins_a_prompt(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    write_project(project, _socket(server))
    async with started(project) as loop:
        pane = (await loop.session.host.agent_panes())["PLANNER"]
        await pane.paste(b"words someone left here")
        task = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert task.state is TaskState.DONE, task.error
        prompts = loop.prompts("PLANNER")
        assert prompts and all("words someone left here" not in p for p in prompts)


# --- 6. resume after an agent died mid-confirmation delivers twice ----------------------


async def test_resume_after_death_mid_delivery_sends_the_prompt_once(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    # The executer dies as the plan is submitted (before it can be confirmed), once.
    executer = EXECUTER_OK + '[faults]\ncrash_at = "before_submit"\ncrash_share = 1.0\n'
    write_project(project, _socket(server), executer=executer)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert task.state is TaskState.FAILED and "poli up --resume" in (task.error or "")
        assert all(m.state is not MessageState.DELIVERING for m in loop.store.list_messages())
        await loop.session.up(resume=True)
        await route(loop.config, loop.store, until=lambda: _ended(loop, task.id))
        final = loop.store.get_task(task.id)
        assert final is not None and final.state is TaskState.DONE, final
        plans = [p for p in loop.prompts("EXECUTER") if "PLANNER plan block" in p]
        assert len(plans) == 1, plans  # the crashed try never logged; the resume copy once


# --- 8. deadlines counted from queueing: a backlog fails ------------------------------


async def test_backlog_deadlines_start_at_delivery(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    slow = _planner_ok().replace("think_time = 0.3", "think_time = 1.0")
    write_project(project, _socket(server), planner=slow, plan_timeout=4, exec_timeout=4)
    async with started(project) as loop:
        ids = [f"T-b{i}" for i in range(4)]
        for tid in ids:
            submit(loop.store, loop.config, "make hello", task_id=tid)
        await route(loop.config, loop.store, until=lambda: all(_ended(loop, i) for i in ids))
        states = {i: loop.store.get_task(i).state for i in ids}  # type: ignore[union-attr]
        assert set(states.values()) == {TaskState.DONE}, states


# --- 9. a question after the block: the task must not end DONE -------------------------


async def test_question_after_the_block_keeps_the_turn_open(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    result = block("PLANNER", "result", "Ran it.", tag="RESULT")
    executer = (
        'mode = "codex"\nthink_time = 0.3\n\n'
        "[[rules]]\n"
        f"match = '(?s)\\AYou received a PLANNER plan block:{IDS}'\n"
        'approval = "echo hi > ran.txt"\napproval_after_reply = true\n'
        'write_file = { path = "ran.txt", content = "ran\\n" }\n'
        f"reply = '''{result}'''\n"
    )
    extra = '[routing]\napproval = "ask"\n'
    write_project(project, _socket(server), executer=executer, extra=extra)
    async with started(project) as loop:
        submit(loop.store, loop.config, "make hello", task_id="T-ask")
        routing = asyncio.create_task(
            route(loop.config, loop.store, until=lambda: _ended(loop, "T-ask"))
        )
        try:

            async def waiting() -> bool:
                task = loop.store.get_task("T-ask")
                return task is not None and task.state is TaskState.WAITING_APPROVAL

            await aretry_until(waiting, 60, what="the task to wait for the approval")
            task = loop.store.get_task("T-ask")
            assert task is not None and "echo hi > ran.txt" in (task.question or "")

            # The block is taken at the router's second look at it (settle), maybe after
            # the question showed on the task.
            async def holding() -> bool:
                turn = loop.store.current_turn("EXECUTER")
                return turn is not None and turn.state is TurnState.HOLDING

            await aretry_until(holding, 30, what="the turn to hold its answer")
            assert not (project / "executer" / "ran.txt").exists()
            from politerm.agents.approval import Decision, answer_pending

            answer_pending(loop.store, "EXECUTER", Decision.APPROVE)
            async with asyncio.timeout(TASK):
                await routing
        finally:
            routing.cancel()
        done = loop.store.get_task("T-ask")
        assert done is not None and done.state is TaskState.DONE, done
        assert (project / "executer" / "ran.txt").read_text() == "ran\n"


# --- 10. the router lock belongs to the tmux session -----------------------------------


def test_router_lock_is_per_tmux_session(tmp_path: pathlib.Path) -> None:
    first = RouterLock("sock", "poli", tmp_path)
    second = RouterLock("sock", "poli", tmp_path)  # another store, same session
    other = RouterLock("sock", "other", tmp_path)
    assert first.acquire()
    try:
        assert not second.acquire()
        assert other.acquire()
        other.release()
    finally:
        first.release()


# --- 11. a timeout names what happened ---------------------------------------------------


async def test_timeout_names_old_blocks_ignored_and_follow_ups(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    broken = PLAN.replace("{nonce}", "ffffff")  # another turn's nonce: an old block, ignored
    planner = PLANNER_HEAD + rule(r"\A(?=TASK_ID=)", broken)
    write_project(project, _socket(server), planner=planner, plan_timeout=2)
    async with started(project) as loop:
        task = await run_task(loop.config, loop.store, "stall", timeout=TASK)
        assert task.state is TaskState.FAILED
        error = task.error or ""
        assert "no block was rejected (" in error, error
        assert "ignored, as they should be)" in error, error
        assert "nudge delivered" in error and "retry delivered" in error, error
        assert TurnEnd.TIMED_OUT.value in loop.store.audit_path.read_text()


# --- ids and aborts ----------------------------------------------------------------------


def _config(tmp_path: pathlib.Path) -> Config:
    return Config(
        tmux=TmuxConfig(socket=f"poli-absent-{tmp_path.name}", session="t"),
        store=StoreConfig(path=tmp_path / "runs.sqlite3"),
    )


def test_task_ids_are_validated(tmp_path: pathlib.Path) -> None:
    config = _config(tmp_path)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        for bad in ("a b", "x" * 65, "semi;colon", "../up", ""):
            with pytest.raises(IdError, match="use letters, digits"):
                submit(store, config, "do it", task_id=bad)
        assert submit(store, config, "do it", task_id="T-1.ok_" + "x" * 57).id.startswith("T-1")
        assert store.list_tasks() != []


async def test_abort_ends_the_task_turns_without_a_router(tmp_path: pathlib.Path) -> None:
    config = _config(tmp_path)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        task = submit(store, config, "do it", task_id="T-ab")
        msg = store.add_message(
            task_id=task.id, sender="USER", recipient="PLANNER", type="task", msg_id=task.id,
            body="do it", header={}, dedupe_key="task:T-ab",
        )  # fmt: skip
        assert msg is not None
        store.start_turn("PLANNER", nonce="n1", task_id=task.id, message_id=msg.id, start_line=0)
        final = await abort(config, store, task.id)
        assert final.state is TaskState.ABORTED
        assert store.current_turn("PLANNER") is None
        assert '"reason": "task_ended"' in store.audit_path.read_text()
