"""The durable run store's audit log, and several connections and processes on one store:
real SQLite files in tmp_path, real child processes killed with SIGKILL, no mocks."""

from __future__ import annotations

import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import politerm
from politerm.errors import StoreError
from politerm.store import MessageState, RunStore, TaskState, iter_audit
from tests.store_helpers import (
    add,
    clock_fixture,  # noqa: F401  # fixtures: pytest finds them here by their names
    store_fixture,  # noqa: F401
    store_path_fixture,  # noqa: F401
)

SRC_DIR = pathlib.Path(politerm.__file__).resolve().parent.parent


def run_child(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


# --- audit log ---------------------------------------------------------------------------


def test_audit_one_line_per_write(store: RunStore) -> None:
    store.set_meta("k", "v")
    store.create_task("t1", "r", max_rounds=2)
    store.update_task("t1", state=TaskState.PLANNING)
    msg = add(store, "k1", task_id="t1")
    dup = store.add_message(
        task_id="t1",
        sender="p",
        recipient="e",
        type="x",
        msg_id="m",
        body="b",
        header={},
        dedupe_key="k1",
    )
    assert dup is None
    store.transition(msg.id, MessageState.DELIVERING, turn_nonce="n")
    store.expire_messages(0.0)  # expires nothing: no line
    assert not store.clear_expectation("t1")  # changes nothing: no line
    store.add_event("note", detail="hello")
    records = list(iter_audit(store.audit_path))
    assert [r["kind"] for r in records] == [
        "meta.set",
        "task.create",
        "task.update",
        "message.add",
        "message.transition",
        "event.add",
    ]
    assert all(isinstance(r["ts"], float) for r in records)
    assert records[2]["state"] == "planning"
    assert (records[4]["id"], records[4]["old"], records[4]["new"]) == (
        msg.id,
        "queued",
        "delivering",
    )
    # iter_audit also accepts the store path.
    assert list(iter_audit(store.path)) == records


def test_iter_audit_tolerates_torn_tail_only(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "runs.sqlite3.audit.jsonl"
    assert list(iter_audit(log)) == []
    log.write_text('{"ts": 1.0, "kind": "a"}\n{"ts": 2.0, "ki')
    assert [r["kind"] for r in iter_audit(log)] == ["a"]
    log.write_text('{"ts": 1.0, "kind": "a"}\nnot json\n{"ts": 2.0, "kind": "b"}\n')
    with pytest.raises(StoreError, match=r"audit\.jsonl:2"):
        list(iter_audit(log))


# --- several connections and processes ---------------------------------------------------


def test_two_connections_see_each_others_commits(store_path: pathlib.Path) -> None:
    with RunStore.open(store_path) as router, RunStore.open(store_path) as status:
        router.create_task("t1", "r", max_rounds=1)
        msg = add(router, "k1", task_id="t1")
        assert status.get_task("t1") is not None
        assert status.next_queued("executer") == msg
        status.add_event("seen", task_id="t1")
        assert [e.kind for e in router.list_events("t1")] == ["seen"]
        router.transition(msg.id, MessageState.DELIVERING, expect=MessageState.QUEUED)
        with pytest.raises(StoreError, match="expected queued"):
            status.transition(msg.id, MessageState.DELIVERING, expect=MessageState.QUEUED)
        dup = status.add_message(
            task_id="t1",
            sender="p",
            recipient="e",
            type="x",
            msg_id="m",
            body="b",
            header={},
            dedupe_key="k1",
        )
        assert dup is None


WRITER_SCRIPT = """
    import pathlib, sys
    from politerm.store import MessageState, RunStore

    store = RunStore.open(pathlib.Path(sys.argv[1]))
    store.create_task("t1", "request", max_rounds=9)
    print("task t1", flush=True)
    i = 0
    while True:
        m = store.add_message(
            task_id="t1", sender="planner", recipient="executer", type="task",
            msg_id=f"m{i}", body=f"body {i}", header={"i": i}, dedupe_key=f"k{i}",
        )
        print("added", m.id, flush=True)
        store.transition(m.id, MessageState.DELIVERING, expect=MessageState.QUEUED,
                         turn_nonce=f"n{i}")
        print("delivering", m.id, flush=True)
        store.add_event("delivering", task_id="t1", data={"id": m.id})
        print("event", m.id, flush=True)
        i += 1
"""


def test_sigkill_mid_sequence_keeps_every_commit(store_path: pathlib.Path) -> None:
    child = run_child(WRITER_SCRIPT, str(store_path))
    assert child.stdout is not None
    lines: list[str] = []
    # Kill it mid-stream, wherever it happens to be: maybe inside a transaction.
    for line in child.stdout:
        lines.append(line)
        if len(lines) >= 60:
            break
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # Each line was printed after its write committed.
    done = [line.split() for line in [*lines, *rest.splitlines()]]
    added = {int(w[1]) for w in done if w[0] == "added"}
    delivering = {int(w[1]) for w in done if w[0] == "delivering"}
    evented = {int(w[1]) for w in done if w[0] == "event"}
    assert len(added) >= 19

    raw = sqlite3.connect(store_path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        raw.close()
    with RunStore.open(store_path) as s:
        messages = {m.id: m for m in s.list_messages(task_id="t1")}
        assert added <= set(messages)
        for mid in delivering:
            assert messages[mid].state is MessageState.DELIVERING
            assert messages[mid].attempts == 1
        # Whatever else got in is whole: queued and untouched, or delivering with one attempt.
        for m in messages.values():
            assert (m.state, m.attempts) in {
                (MessageState.QUEUED, 0),
                (MessageState.DELIVERING, 1),
            }
        assert evented <= {e.data["id"] for e in s.list_events("t1", limit=10_000)}
        # The dead writer left no lock behind: we can write at once.
        s.create_task("t2", "after the crash", max_rounds=1)
        kinds = [r["kind"] for r in iter_audit(s.audit_path)]
        assert kinds.count("message.add") >= len(added)


SELF_KILL_SCRIPT = """
    import os, pathlib, sqlite3, sys
    from politerm.store import MessageState, RunStore

    path = pathlib.Path(sys.argv[1])
    store = RunStore.open(path)
    store.create_task("t1", "request", max_rounds=9)
    m = store.add_message(
        task_id="t1", sender="planner", recipient="executer", type="task",
        msg_id="m0", body="body", header={}, dedupe_key="k0",
    )
    store.transition(m.id, MessageState.DELIVERING, turn_nonce="n0")

    # An open write transaction when the process dies must vanish without a trace.
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("UPDATE messages SET state = 'dead' WHERE id = ?", (m.id,))
    raw.execute("INSERT INTO meta (key, value) VALUES ('uncommitted', 'x')")
    print("in transaction", flush=True)
    os.kill(os.getpid(), 9)
"""


def test_sigkill_inside_a_transaction(store_path: pathlib.Path) -> None:
    child = run_child(SELF_KILL_SCRIPT, str(store_path))
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert out.strip() == "in transaction"
    with RunStore.open(store_path) as s:
        msg = s.find_message("k0")
        assert msg is not None
        assert (msg.state, msg.attempts, msg.turn_nonce) == (MessageState.DELIVERING, 1, "n0")
        assert s.get_meta("uncommitted") is None
        s.transition(msg.id, MessageState.DELIVERED, expect=MessageState.DELIVERING)
        kinds = [r["kind"] for r in iter_audit(s.audit_path)]
        assert kinds == ["task.create", "message.add", "message.transition", "message.transition"]


DEDUPE_RACE_SCRIPT = """
    import pathlib, sys
    from politerm.store import RunStore

    store = RunStore.open(pathlib.Path(sys.argv[1]))
    won = 0
    for i in range(150):
        m = store.add_message(
            task_id=None, sender="planner", recipient="executer", type="task",
            msg_id=f"m{i}", body=f"from {sys.argv[2]}", header={}, dedupe_key=f"k{i}",
        )
        won += m is not None
    print(won, flush=True)
"""


def test_two_processes_race_on_dedupe(store_path: pathlib.Path) -> None:
    # Both also race to create and migrate the fresh file.
    children = [run_child(DEDUPE_RACE_SCRIPT, str(store_path), name) for name in ("a", "b")]
    wins = []
    for child in children:
        out, _ = child.communicate(timeout=90)
        assert child.returncode == 0
        wins.append(int(out))
    assert sum(wins) == 150
    with RunStore.open(store_path) as s:
        assert len(s.list_messages()) == 150
        assert sum(1 for r in iter_audit(s.audit_path) if r["kind"] == "message.add") == 150


def test_batch_is_one_transaction_and_audits_after_commit(tmp_path: pathlib.Path) -> None:
    store = RunStore.open(tmp_path / "b.sqlite3")
    store.create_task("T1", "req", max_rounds=3)
    before = len(list(iter_audit(store.audit_path)))
    with pytest.raises(RuntimeError), store.batch():
        store.update_task("T1", round=2)
        store.set_meta("k", "v")
        raise RuntimeError
    task = store.get_task("T1")
    assert task is not None and task.round == 0
    assert store.get_meta("k") is None
    assert len(list(iter_audit(store.audit_path))) == before
    with store.batch():
        store.update_task("T1", round=1)
        with store.batch():
            store.set_meta("k", "v")
        other = RunStore.open(tmp_path / "b.sqlite3")
        assert other.get_meta("k") is None  # not committed until the outer batch ends
        other.close()
    assert store.get_meta("k") == "v"
    assert len(list(iter_audit(store.audit_path))) == before + 2
    store.close()
