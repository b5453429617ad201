"""The short way from a block to the next agent: one commit, one look, fsync after the paste.

A forwarded prompt goes DELIVERING in the commit that records the block when its recipient
is idle (the recipient's own loop types it); that commit and a delivery's DELIVERING commit
do not wait for the disk, the outcome's commit does; the empty-box check reuses the screen
the driver just looked at when the program printed nothing since. None of it may cost a
guarantee: exactly one prompt per step, the box checked before every paste, nothing typed
for a task that ended in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import sys
import typing as t

import pytest

from politerm.agents import AgentState, load_profile
from politerm.driver import AgentDriver
from politerm.driver.blocks import BlockReader
from politerm.engine.loop import submit
from politerm.redact import Redactor
from politerm.store import RunStore
from politerm.store.models import MessageState, TaskState
from politerm.terminal import on_screen
from politerm.testing.retry import aretry_until
from politerm.tmux import new_window
from tests.loophelpers import started, write_project
from tests.test_profiles import screen
from tests.test_turns import _router, _socket

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.terminal import Snapshot
    from politerm.tmux import ControlClient, TmuxServer

TASK = 90.0  # bound on one task in these tests
FAKE = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]


def _synchronous(store: RunStore) -> int:
    # The store's own connection: PRAGMA synchronous is per connection.
    with store._reading() as conn:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])


# --- the store: commits that wait for the disk, and those that do not -------------------


def test_an_undurable_batch_commits_at_once_and_sync_makes_it_durable(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    with RunStore.open(path) as store:
        full = _synchronous(store)
        assert full == 2  # FULL
        with store.batch(durable=False):
            store.set_meta("k", "v1")
            with store.batch():  # a nested batch joins the outer one's durability
                store.set_meta("k2", "v2")
        assert _synchronous(store) == full, "FULL must come back after the commit"
        assert store._unsynced
        # Visible to another connection at once (it is committed, only not yet fsynced).
        other = sqlite3.connect(path)
        try:
            got = other.execute("SELECT value FROM meta WHERE key = 'k2'").fetchone()
        finally:
            other.close()
        assert got == ("v2",)
        store.sync()
        assert not store._unsynced
        store.sync()  # nothing left: a no-op
        with store.batch(durable=False):
            store.set_meta("k", "v3")
        store.set_meta("k", "v4")  # a durable commit syncs the WAL, the earlier one too
        assert not store._unsynced


def test_a_failed_undurable_batch_rolls_back_and_restores_full(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    with RunStore.open(path) as store:
        with contextlib.suppress(RuntimeError), store.batch(durable=False):
            store.set_meta("k", "v1")
            msg = "boom"
            raise RuntimeError(msg)
        assert store.get_meta("k") is None
        assert _synchronous(store) == 2


def test_a_long_text_written_twice_is_redacted_the_same_and_a_new_pattern_counts(
    tmp_path: pathlib.Path,
) -> None:
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        text = "x" * 300 + " token CODENAME-42 " + "y" * 300
        first = store.redact(text)
        assert first == store.redact(text) == text  # nothing secret yet, remembered
        store.set_redaction(Redactor([r"CODENAME-\d+"]))
        again = store.redact(text)
        assert "CODENAME-42" not in again and "[REDACTED" in again


def test_a_remembered_redaction_still_hands_its_secret_to_the_vault(
    tmp_path: pathlib.Path,
) -> None:
    kept: list[dict[str, str]] = []
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.set_redaction(Redactor(), kept.append)
        short = "pwd=hunter2"
        json_text = '{"a": ["password=swordfish"], "b": "PLANNER"}'
        for _ in range(2):
            assert store.redact(short).startswith("[REDACTED:password#")
            red = store.redact(json_text)
            assert "swordfish" not in red and '"b": "PLANNER"' in red
            assert store.redact("PLANNER") == "PLANNER"
        secrets = [v for found in kept for v in found.values()]
        assert secrets == ["pwd=hunter2", "password=swordfish"] * 2


# --- the driver: the empty-box check reuses a fresh look --------------------------------


async def test_the_last_look_is_reused_only_until_the_program_prints(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    pane = await new_window(tmux_session, tmux_server, session="t", name="A", argv=FAKE)
    driver = AgentDriver("A", load_profile("fake-plain"), pane)
    await driver.wait_ready(60)
    snap = await driver.snapshot()
    assert snap is not None
    assert driver.fresh_snapshot() is snap
    assert await driver.look() is snap
    printed = pane.output_event()
    await pane.send_keys("x")  # the fake agent echoes it into its input box
    await asyncio.wait_for(printed.wait(), 60)
    assert driver.fresh_snapshot() is None, "a screen the program changed since is not fresh"
    now = await driver.look()
    assert now is not None and now is not snap
    assert driver.profile.input_text(now) == "x"
    # Delivery sees that text (from a new look) and clears it before the paste.
    result = await driver.deliver("hello there")
    assert result.ok, result
    assert driver.fresh_snapshot() is None  # typing invalidates the last look


def test_a_snapshot_read_again_gives_the_reading_of_that_very_snapshot() -> None:
    claude, aider = load_profile("claude"), load_profile("aider")
    busy, idle = screen("claude-03-busy.txt"), screen("claude-00-ready.txt")
    first = claude.detect(busy)
    assert first.state is AgentState.BUSY
    assert claude.detect(busy) is first  # the same look, read twice: read once
    assert claude.detect(idle).state is AgentState.READY
    assert claude.detect(busy) == claude._detect(busy, limited=True)  # a new reading
    assert aider.detect(idle) == aider._detect(idle, limited=True)  # another profile
    assert claude.detect(busy, limited=False) == claude._detect(busy, limited=False)
    assert claude.detect(dataclasses.replace(busy, alive=False)).state is AgentState.EXITED
    looks = [dataclasses.replace(idle, cursor_x=n) for n in range(40)]  # more than are kept
    assert [claude.detect(s).state for s in looks] == [AgentState.READY] * 40
    assert claude.detect(looks[-1]) is claude.detect(looks[-1])


# --- the turn's window: read off the snapshot when its rows are its lines ---------------


@pytest.mark.parametrize(
    ("script", "rows_are_lines"),
    [
        ("printf 'a\\nb\\nc\\n'", True),  # every window on the screen is read off it
        ("printf 'a\\n%050d\\nc\\n' 0", False),  # a wrapped row: captured by row numbers
        ("seq 1 30", True),  # windows starting in the history are captured
    ],
    ids=["plain", "wrapped", "history"],
)
async def test_a_turn_window_read_off_the_snapshot_is_the_window_tmux_captures(
    tmux_session: ControlClient, tmux_server: TmuxServer, script: str, rows_are_lines: bool
) -> None:
    argv = ["sh", "-c", f"{script}; echo END; exec sleep 600"]
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="W", argv=argv, size=(20, 10)
    )
    reader = BlockReader("W", load_profile("fake-plain"), pane)

    async def settled() -> Snapshot | None:
        snap = await pane.snapshot()
        return snap if any(ln.startswith("END") for ln in snap.lines) else None

    snap = await aretry_until(settled, 60, interval=0.05, what="the script's output")
    read_off = 0
    for start in range(max(0, snap.history_size - 3), snap.history_size + snap.rows):
        captured = await pane.capture(start=start - snap.history_size, end="-")
        assert await reader.lines(snap, start) == captured, f"window from row {start}"
        read_off += on_screen(snap, start) is not None
    assert read_off == (snap.rows if rows_are_lines else 0)


# --- the router: the forwarded prompt goes DELIVERING in its block's commit -------------


async def test_a_forwarded_plan_goes_delivering_in_the_commit_that_records_its_block(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    write_project(project, _socket(server))
    async with started(project) as loop:
        router = await _router(loop)
        store = loop.store
        seen: list[tuple[bool, set[MessageState]]] = []
        batch = store.batch

        @contextlib.contextmanager
        def watched(*, durable: bool = True) -> t.Iterator[None]:
            outer = store._batch_depth == 0
            with batch(durable=durable):
                yield
            if outer:
                planned = any(b.type == "plan" for b in store.list_blocks("T-hop"))
                states = {
                    m.state
                    for m in store.list_messages(task_id="T-hop", recipient="EXECUTER")
                    if m.type == "plan"
                }
                seen.append((planned, states))

        store.batch = watched  # type: ignore[method-assign]
        submit(store, loop.config, "make hello", task_id="T-hop")
        routing = asyncio.create_task(router.run())
        try:

            async def done() -> bool:
                task = store.get_task("T-hop")
                return task is not None and task.state.is_terminal

            await aretry_until(done, TASK, interval=0.05, what="task T-hop to end")
        finally:
            router.stop()
            await routing
        task = store.get_task("T-hop")
        assert task is not None and task.state is TaskState.DONE, task
        first = next(states for planned, states in seen if planned)
        assert MessageState.QUEUED not in first, (
            f"the plan block was committed with its forwarded prompt still queued: {first}"
        )
        assert first & {MessageState.DELIVERING, MessageState.DELIVERED}
        assert len(loop.prompts("EXECUTER")) == 1


async def test_a_handed_off_prompt_whose_task_ended_meanwhile_is_not_typed(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    write_project(project, _socket(server))
    async with started(project) as loop:
        router = await _router(loop)
        store = loop.store
        task = submit(store, loop.config, "make hello", task_id="T-gone")
        store.update_task(task.id, state=TaskState.EXECUTING)
        fwd = store.add_message(
            task_id=task.id, sender="PLANNER", recipient="EXECUTER", type="plan",
            msg_id=task.id, body="1. Do it.", header={}, dedupe_key="plan:T-gone",
        )  # fmt: skip
        assert fwd is not None
        executer = router.agents["EXECUTER"]
        router.loops["EXECUTER"].settled = True
        await aretry_until(
            lambda: _ready(executer), 60, interval=0.05, what="the executer to be ready"
        )
        snap = await executer.look()
        assert snap is not None
        with store.batch(durable=False):
            assert router.sending.hand_off("EXECUTER", fwd, snap)
        begun = router.loops["EXECUTER"].handoff
        assert begun is not None
        msg = store.get_message(fwd.id)
        assert msg is not None and msg.state is MessageState.DELIVERING
        # The task ends before the recipient's loop gets to type it.
        router.executor.fail(task.id, "aborted in between")
        router.loops["EXECUTER"].handoff = None
        await router.sending.send_handoff(executer, begun)
        msg = store.get_message(fwd.id)
        assert msg is not None and msg.state is MessageState.DEAD, msg
        assert store.current_turn("EXECUTER") is None
        assert not store._unsynced
        after = await executer.snapshot()
        assert after is not None and executer.profile.input_text(after) == ""
        assert loop.prompts("EXECUTER") == []


async def _ready(driver: AgentDriver) -> bool:
    obs = await driver.observe()
    return obs.state.value == "ready"


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "proj"
