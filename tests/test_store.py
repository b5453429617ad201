"""The durable run store: opening, files and schema; agents, tasks, expectations, turns.

Real SQLite files in tmp_path, no mocks. Messages are in test_store_messages.py, the audit
log and several connections and processes in test_store_processes.py."""

from __future__ import annotations

import os
import pathlib
import sqlite3

import pytest

from politerm.errors import SchemaTooNew, StoreError, TransitionRejected
from politerm.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    MessageState,
    Migration,
    RunStore,
    TaskState,
    TurnEnd,
    TurnState,
    audit_path_for,
    default_store_path,
)
from politerm.store.db import connect
from tests.store_helpers import (
    FakeClock,
    add,
    clock_fixture,  # noqa: F401  # fixtures: pytest finds them here by their names
    mode,
    store_fixture,  # noqa: F401
    store_path_fixture,  # noqa: F401
)

# --- opening, files, schema --------------------------------------------------------------


def test_create_open_reopen(store_path: pathlib.Path) -> None:
    with RunStore.open(store_path) as s:
        assert s.path == store_path
        assert s.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
        s.set_meta("router.pid", "123")
        s.set_meta("router.pid", "456")
    with RunStore.open(store_path) as s:
        assert s.get_meta("router.pid") == "456"
        assert s.get_meta("missing") is None


def test_default_store_path_is_under_the_state_dir() -> None:
    path = default_store_path()
    assert path.name == "runs.sqlite3"
    assert path.parent.name == "politerm"
    # conftest points XDG_STATE_HOME into tmp_path, so this never touches the real home.
    assert str(path).startswith(os.environ["XDG_STATE_HOME"])
    with RunStore.open() as s:
        assert s.path == path
    assert path.exists()


def test_files_are_private(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "new" / "dir" / "runs.sqlite3"
    with RunStore.open(path) as s:
        s.set_meta("k", "v")  # a write, so the -wal and -shm files exist
        for p in (path, pathlib.Path(f"{path}-wal"), pathlib.Path(f"{path}-shm")):
            assert p.exists(), p
            assert mode(p) == 0o600, p
        assert s.audit_path == audit_path_for(path)
        assert mode(s.audit_path) == 0o600
    assert mode(path.parent) == 0o700
    assert mode(path.parent.parent) == 0o700


def test_existing_directory_mode_is_left_alone(tmp_path: pathlib.Path) -> None:
    tmp_path.chmod(0o755)
    with RunStore.open(tmp_path / "runs.sqlite3"):
        pass
    assert mode(tmp_path) == 0o755


def test_pragmas(store_path: pathlib.Path) -> None:
    conn = connect(store_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    finally:
        conn.close()
    # WAL is a property of the file: a plain connection sees it too.
    raw = sqlite3.connect(store_path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_schema_too_new(store_path: pathlib.Path) -> None:
    RunStore.open(store_path).close()
    raw = sqlite3.connect(store_path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    raw.close()
    with pytest.raises(SchemaTooNew) as info:
        RunStore.open(store_path)
    message = str(info.value)
    assert "\n" not in message
    assert str(store_path) in message
    assert str(SCHEMA_VERSION + 5) in message
    assert str(SCHEMA_VERSION) in message


def test_garbage_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    garbage = b"this is not a database, just some text\n" * 100
    path.write_bytes(garbage)
    with pytest.raises(StoreError) as info:
        RunStore.open(path)
    assert not isinstance(info.value, SchemaTooNew)
    assert str(path) in str(info.value)
    assert path.read_bytes() == garbage


def test_directory_instead_of_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    path.mkdir()
    with pytest.raises(StoreError, match=str(path)):
        RunStore.open(path)


def test_migration_from_v1_preserves_data(store_path: pathlib.Path) -> None:
    conn = connect(store_path, migrations=MIGRATIONS[:1])
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchall()
    conn.execute(
        "INSERT INTO tasks (id, request, state, max_rounds, created, updated)"
        " VALUES ('t1', 'fix it', 'executing', 3, 1.0, 2.0)"
    )
    conn.execute(
        "INSERT INTO messages (task_id, sender, recipient, type, msg_id, body, state,"
        " created, updated, dedupe_key)"
        " VALUES ('t1', 'planner', 'executer', 'task', 'm1', 'do it', 'queued', 1.0, 1.0, 'k1')"
    )
    conn.close()

    with RunStore.open(store_path) as s:
        assert s.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
        task = s.get_task("t1")
        assert task is not None
        assert (task.request, task.state, task.max_rounds) == ("fix it", TaskState.EXECUTING, 3)
        msg = s.find_message("k1")
        assert msg is not None
        assert (msg.body, msg.state, msg.header) == ("do it", MessageState.QUEUED, {})
        assert s.next_queued("executer") == msg
        event = s.add_event("task.resumed", task_id="t1", detail="after upgrade")
        assert s.list_events("t1") == [event]


def test_failed_migration_rolls_back(store_path: pathlib.Path) -> None:
    RunStore.open(store_path).close()
    broken = Migration(
        SCHEMA_VERSION + 1, "broken", ("CREATE TABLE half_done (a)", "THIS IS NOT SQL")
    )
    with pytest.raises(StoreError, match=f"migration {SCHEMA_VERSION + 1}"):
        connect(store_path, migrations=(*MIGRATIONS, broken))
    with RunStore.open(store_path) as s:
        assert s.schema_version == SCHEMA_VERSION
    raw = sqlite3.connect(store_path)
    try:
        assert not raw.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchall()
    finally:
        raw.close()


def test_closed_store_raises(store_path: pathlib.Path) -> None:
    s = RunStore.open(store_path)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.get_meta("k")
    with pytest.raises(StoreError, match="closed"):
        s.set_meta("k", "v")


# --- agents, tasks, expectations, turns ---------------------------------------------------


def test_agents(store: RunStore, clock: FakeClock) -> None:
    a = store.upsert_agent(
        "planner",
        session="poli",
        pane_id="%1",
        command="claude",
        cwd="/w",
        profile="claude",
        resume_command=None,
        env={"A": "1"},
    )
    assert (a.state, a.env, a.created) == ("starting", {"A": "1"}, clock.now)
    store.set_agent_state("planner", "ready")
    clock.now += 5
    b = store.upsert_agent(
        "planner",
        session="poli",
        pane_id="%7",
        command="claude",
        cwd="/w",
        profile="claude",
        resume_command="claude --resume x",
    )
    # A re-upsert moves the pane but keeps the state and creation time.
    assert (b.pane_id, b.state, b.env, b.created, b.updated) == ("%7", "ready", {}, 1000.0, 1005.0)
    assert store.get_agent("planner") == b
    assert store.get_agent("nobody") is None
    store.upsert_agent(
        "executer",
        session="poli",
        pane_id="%2",
        command="c",
        cwd="/",
        profile="p",
        resume_command=None,
    )
    assert [x.name for x in store.list_agents()] == ["executer", "planner"]
    with pytest.raises(StoreError, match="nobody"):
        store.set_agent_state("nobody", "ready")


@pytest.mark.parametrize("n", [6, 60])
def test_a_listing_builds_only_the_agents_that_changed(
    store: RunStore, store_path: pathlib.Path, n: int
) -> None:
    # A view lists every agent on each refresh: at 500 agents, building each Agent again
    # (its env decoded from JSON) was most of the listing.
    for i in range(n):
        store.upsert_agent(
            f"A{i:03d}", session="poli", pane_id=f"%{i}", command="c", cwd="/w",
            profile="p", resume_command=None, env={"I": str(i)},
        )  # fmt: skip
    first = store.list_agents()
    assert store.agents_built == n
    again = store.list_agents()
    assert store.agents_built == n
    assert all(a is b for a, b in zip(first, again, strict=True))
    store.set_agent_state("A001", "busy")
    changed = store.list_agents()
    assert store.agents_built == n + 1
    assert [a.state for a in changed[:3]] == ["starting", "busy", "starting"]
    # What the listing gives is what a store that never listed before reads.
    with RunStore.open(store_path) as fresh:
        assert fresh.list_agents() == changed
    store.upsert_agent(
        "A000", session="poli", pane_id="%99", command="c", cwd="/w", profile="p",
        resume_command=None, env={"I": "new"},
    )  # fmt: skip
    [a0] = [a for a in store.list_agents() if a.name == "A000"]
    assert (a0.pane_id, a0.env) == ("%99", {"I": "new"})
    assert store.agents_built == n + 2


def test_tasks(store: RunStore, clock: FakeClock) -> None:
    task = store.create_task("t1", "add a flag", max_rounds=4)
    assert (task.state, task.round, task.report, task.created) == (
        TaskState.PENDING,
        0,
        None,
        clock.now,
    )
    with pytest.raises(StoreError, match="t1"):
        store.create_task("t1", "again", max_rounds=1)
    store.create_task("t2", "other", max_rounds=1)
    clock.now += 1
    t1 = store.update_task("t1", state=TaskState.WAITING_USER, round=2, question="which flag?")
    assert (t1.state, t1.round, t1.question, t1.updated) == (
        TaskState.WAITING_USER,
        2,
        "which flag?",
        clock.now,
    )
    t1 = store.update_task("t1", state=TaskState.EXECUTING, clear=["question"])
    assert (t1.question, t1.round) == (None, 2)
    store.update_task("t2", state=TaskState.DONE, report="done")
    assert [x.id for x in store.list_tasks()] == ["t1", "t2"]
    assert [x.id for x in store.list_tasks(active_only=True)] == ["t1"]
    with pytest.raises(StoreError, match="missing"):
        store.update_task("missing", round=1)
    with pytest.raises(StoreError, match="both"):
        store.update_task("t1", report="x", clear=["report"])


def test_expectations(store: RunStore) -> None:
    store.create_task("t1", "r", max_rounds=1)
    store.create_task("t2", "r", max_rounds=1)
    store.set_expectation("t1", sender="executer", type="report", deadline=50.0)
    store.set_expectation("t2", sender="planner", type="task", deadline=20.0, nudged=True)
    assert [e.task_id for e in store.list_expectations()] == ["t2", "t1"]
    assert store.mark_nudged("t1").nudged
    e = store.set_expectation("t1", sender="planner", type="review", deadline=90.0)
    assert (e.sender, e.nudged) == ("planner", False)
    assert store.get_expectation("t1") == e
    assert store.clear_expectation("t1")
    assert not store.clear_expectation("t1")
    assert store.get_expectation("t1") is None
    with pytest.raises(StoreError, match="t1"):
        store.mark_nudged("t1")
    with pytest.raises(StoreError, match="nope"):
        store.set_expectation("nope", sender="x", type="y", deadline=1.0)


def test_turns(store: RunStore) -> None:
    store.create_task("t1", "r", max_rounds=1)
    msg = add(store, "k1", task_id="t1")
    turn = store.start_turn("executer", nonce="a", task_id="t1", message_id=msg.id, start_line=40)
    assert store.current_turn("executer") == turn
    assert store.current_turn("planner") is None
    assert turn.state is TurnState.DELIVERING
    with pytest.raises(TransitionRejected, match="turn a is still open; end it first"):
        store.start_turn("executer", nonce="b", task_id="t1", message_id=None, start_line=90)
    assert store.end_turn("executer", "a", TurnEnd.NOT_DELIVERED)
    store.start_turn("executer", nonce="b", task_id="t1", message_id=None, start_line=90)
    assert not store.end_turn("executer", "a")  # stale: a newer prompt replaced it
    current = store.current_turn("executer")
    assert current is not None
    assert (current.nonce, current.start_line) == ("b", 90)
    assert store.end_turn("executer", "b")
    assert store.current_turn("executer") is None
