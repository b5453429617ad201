"""Store change notifications: commits from other processes wake watchers; reads are deltas."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import typing as t

from politerm.engine.loop import follow
from politerm.store import MessageState, RunStore, TaskState
from politerm.store.watch import EventCursor, StoreWatch, agents_with_work, changed_since

if t.TYPE_CHECKING:
    import pathlib

    from politerm.store.models import Event


def _commit_from_another_process(path: pathlib.Path, detail: str) -> None:
    code = (
        "import sys, pathlib\n"
        "from politerm.store import RunStore\n"
        "with RunStore.open(pathlib.Path(sys.argv[1])) as s:\n"
        "    s.add_event('note', detail=sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path), detail], check=True, timeout=60)


async def test_a_commit_from_another_process_wakes_the_watch(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    with RunStore.open(path) as store:
        async with StoreWatch(path) as watch:
            changed = watch.event()
            seen = watch.changes
            await asyncio.to_thread(_commit_from_another_process, path, "hello")
            assert await watch.wait(30, event=changed), "no store notification within 30 s"
            assert watch.changes > seen
            assert [e.detail for e in store.list_events()] == ["hello"]


async def test_a_quiet_store_does_not_wake_the_watch(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    RunStore.open(path).close()
    (tmp_path / "unrelated.txt").write_text("x")
    async with StoreWatch(path) as watch:
        changed = watch.event()
        # Writes to other files in the directory are not the store's.
        (tmp_path / "unrelated.txt").write_text("y")
        assert not await watch.wait(0.5, event=changed)
        assert watch.changes == 0


async def test_subscribers_are_called_on_each_change(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    calls: list[int] = []
    with RunStore.open(path) as store:
        async with StoreWatch(path) as watch:
            watch.subscribe(lambda: calls.append(1))
            changed = watch.event()
            store.add_event("note", detail="one")
            assert await watch.wait(30, event=changed)
    assert calls


def test_changed_since_counts_only_other_connections(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    with RunStore.open(path) as store:
        _, seen = changed_since(store, -1)
        store.add_event("note", detail="mine")
        changed, seen = changed_since(store, seen)
        assert not changed, "a process's own commit counted as a change"
        _commit_from_another_process(path, "theirs")
        changed, _ = changed_since(store, seen)
        assert changed


def test_event_cursor_reads_only_new_events(tmp_path: pathlib.Path) -> None:
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.add_event("note", detail="old")
        cursor = EventCursor(store)
        assert cursor.read() == []
        store.add_event("note", detail="a", task_id=None)
        store.add_event("note", detail="b")
        assert [e.detail for e in cursor.read()] == ["a", "b"]
        assert cursor.read() == []
        store.add_event("note", detail="c")
        assert [e.detail for e in cursor.read(limit=10)] == ["c"]


def test_event_cursor_of_one_task(tmp_path: pathlib.Path) -> None:
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.create_task("T1", "x", max_rounds=3)
        store.create_task("T2", "y", max_rounds=3)
        cursor = EventCursor(store, task_id="T1", after=0)
        store.add_event("note", task_id="T2", detail="other")
        store.add_event("note", task_id="T1", detail="mine")
        assert [e.detail for e in cursor.read()] == ["mine"]


def _queue(store: RunStore, task: str, recipient: str, n: int) -> int:
    msg = store.add_message(
        task_id=task,
        sender="USER",
        recipient=recipient,
        type="task",
        msg_id=task,
        body="do it",
        header={},
        dedupe_key=f"k{n}",
    )
    assert msg is not None
    return msg.id


def test_only_agents_with_new_work_are_woken(tmp_path: pathlib.Path) -> None:
    agents = [f"A{i}" for i in range(20)]
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        assert agents_with_work(store, agents) == set()
        store.create_task("T1", "x", max_rounds=3)
        store.create_task("T2", "y", max_rounds=3)
        _queue(store, "T1", "A3", 1)
        # A delivered message is no new work.
        done = _queue(store, "T1", "A4", 2)
        store.transition(done, MessageState.DELIVERING)
        store.transition(done, MessageState.DELIVERED)
        # A7's turn belongs to a task that another process just aborted: it must look.
        store.start_turn("A7", nonce="n7", task_id="T2", message_id=None, start_line=0)
        store.start_turn("A8", nonce="n8", task_id="T1", message_id=None, start_line=0)
        store.update_task("T2", state=TaskState.ABORTED, error="aborted by the user")
        assert agents_with_work(store, agents) == {"A3", "A7"}
        # Agents this router does not drive are never named.
        assert agents_with_work(store, ["A4", "A8"]) == set()


async def test_follow_prints_events_written_by_another_process(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    printed: list[Event] = []
    got = asyncio.Event()

    def printer(event: Event) -> None:
        printed.append(event)
        got.set()

    with RunStore.open(path) as store:
        store.add_event("note", detail="before")
        cursor = EventCursor(store)
        watch = StoreWatch(path)
        await watch.start()
        follower = asyncio.create_task(follow(store, printer, cursor=cursor, watch=watch))
        try:
            await asyncio.to_thread(_commit_from_another_process, path, "after")
            async with asyncio.timeout(30):
                await got.wait()
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await watch.close()
    assert [e.detail for e in printed] == ["after"]


async def test_a_commit_published_after_its_last_file_write_is_still_reported(
    tmp_path: pathlib.Path,
) -> None:
    # SQLite writes a commit's WAL frames, waits for fsync, and only then publishes them: on a
    # loaded disk the last file event of a commit comes long before anyone can read it. Here
    # the only event the watch gets is a write that commits nothing yet; the commit itself is
    # made through hard links in another directory, which this directory's watch never hears.
    path = tmp_path / "runs.sqlite3"
    side = tmp_path / "side"
    side.mkdir()
    with RunStore.open(path) as store:
        store.add_event("note", detail="before")  # the WAL and its index now exist
        for name in ("runs.sqlite3", "runs.sqlite3-wal", "runs.sqlite3-shm"):
            os.link(tmp_path / name, side / name)
        seen = store.data_version()
        looks: list[bool] = []

        def look() -> None:
            nonlocal seen
            changed, seen = changed_since(store, seen)
            looks.append(changed)

        async with StoreWatch(path) as watch:
            watch.subscribe(look)
            wal = tmp_path / "runs.sqlite3-wal"
            with wal.open("r+b") as f:  # a write that commits nothing (the same first byte)
                first = f.read(1)
                f.seek(0)
                f.write(first)
            await asyncio.sleep(0.3)  # the watch has looked once and found nothing new
            writer = sqlite3.connect(side / "runs.sqlite3")
            try:
                with writer:
                    writer.execute(
                        "INSERT INTO meta (key, value) VALUES ('late', 'commit')"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                    )
            finally:
                writer.close()
            for _ in range(600):
                if True in looks:
                    break
                await asyncio.sleep(0.05)
            assert True in looks, f"the commit was never reported in 30 s; looks: {looks}"
        assert store.get_meta("late") == "commit"
