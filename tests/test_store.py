"""The durable run store: real SQLite files in tmp_path, real child processes, no mocks."""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import typing as t

import pytest

import politerm
from politerm.errors import SchemaTooNew, StoreError, TransitionRejected
from politerm.store import (
    MESSAGE_TRANSITIONS,
    MIGRATIONS,
    SCHEMA_VERSION,
    Message,
    MessageState,
    Migration,
    RunStore,
    TaskState,
    TurnEnd,
    TurnState,
    audit_path_for,
    default_store_path,
    iter_audit,
)
from politerm.store.db import connect

SRC_DIR = pathlib.Path(politerm.__file__).resolve().parent.parent


class FakeClock:
    """A settable clock so TTLs and timestamps are deterministic."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "state" / "runs.sqlite3"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(store_path: pathlib.Path, clock: FakeClock) -> t.Iterator[RunStore]:
    with RunStore.open(store_path, clock=clock) as s:
        yield s


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def add(
    store: RunStore,
    key: str,
    *,
    recipient: str = "executer",
    task_id: str | None = None,
    state: MessageState = MessageState.QUEUED,
    ttl: float | None = None,
) -> Message:
    msg = store.add_message(
        task_id=task_id,
        sender="planner",
        recipient=recipient,
        type="task",
        msg_id=f"id-{key}",
        body=f"body of {key}",
        header={"key": key},
        nonce="n0",
        dedupe_key=key,
        state=state,
        ttl=ttl,
    )
    assert msg is not None
    return msg


def run_child(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC_DIR)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
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


# --- messages ----------------------------------------------------------------------------


def test_add_message_dedupe(store: RunStore, clock: FakeClock) -> None:
    first = add(store, "block-1", ttl=30)
    assert (first.state, first.attempts, first.deadline) == (MessageState.QUEUED, 0, 1030.0)
    assert first.header == {"key": "block-1"}
    again = store.add_message(
        task_id=None,
        sender="planner",
        recipient="executer",
        type="task",
        msg_id="different",
        body="different body",
        header={},
        dedupe_key="block-1",
    )
    assert again is None
    assert store.list_messages() == [first]
    assert store.find_message("block-1") == first
    assert store.get_message(first.id) == first
    assert store.find_message("nope") is None


def test_add_message_unknown_task(store: RunStore) -> None:
    with pytest.raises(StoreError):
        add(store, "k", task_id="no-such-task")


def test_transition_cas(store: RunStore) -> None:
    msg = add(store, "k")
    with pytest.raises(StoreError, match="is queued, expected delivering"):
        store.transition(msg.id, MessageState.DELIVERED, expect=MessageState.DELIVERING)
    m = store.transition(
        msg.id,
        MessageState.DELIVERING,
        expect={MessageState.QUEUED, MessageState.RETRIED},
        turn_nonce="t-1",
        text="[[poli task]] ...",
    )
    assert (m.state, m.attempts, m.turn_nonce, m.text) == (
        MessageState.DELIVERING,
        1,
        "t-1",
        "[[poli task]] ...",
    )
    # A second router acting on the same stale view loses.
    with pytest.raises(StoreError, match="is delivering, expected queued"):
        store.transition(msg.id, MessageState.DELIVERING, expect=MessageState.QUEUED)
    m = store.transition(msg.id, MessageState.RETRIED, error="no echo")
    m = store.transition(msg.id, MessageState.DELIVERING, turn_nonce="t-2")
    assert (m.attempts, m.turn_nonce, m.last_error) == (2, "t-2", "no echo")
    m = store.transition(msg.id, MessageState.DELIVERED, evidence="line 12")
    assert m.evidence == "line 12"
    assert store.get_message(msg.id) == m
    with pytest.raises(StoreError, match="no message 999"):
        store.transition(999, MessageState.DEAD)


ALLOWED: t.Final = {
    ("parsed", "queued"),
    ("parsed", "dead"),
    ("queued", "delivering"),
    ("queued", "dead"),
    ("delivering", "delivered"),
    ("delivering", "retried"),
    ("delivering", "dead"),
    ("delivering", "queued"),
    ("retried", "delivering"),
    ("retried", "dead"),
    ("delivered", "acknowledged"),
}

# How to walk a fresh QUEUED message to each state.
PATHS: t.Final[dict[MessageState, list[MessageState]]] = {
    MessageState.PARSED: [],
    MessageState.QUEUED: [],
    MessageState.DELIVERING: [MessageState.DELIVERING],
    MessageState.DELIVERED: [MessageState.DELIVERING, MessageState.DELIVERED],
    MessageState.ACKNOWLEDGED: [
        MessageState.DELIVERING,
        MessageState.DELIVERED,
        MessageState.ACKNOWLEDGED,
    ],
    MessageState.RETRIED: [MessageState.DELIVERING, MessageState.RETRIED],
    MessageState.DEAD: [MessageState.DEAD],
}


class TransitionCase(t.NamedTuple):
    test_id: str
    old: MessageState
    new: MessageState
    allowed: bool


TRANSITION_CASES = [
    TransitionCase(f"{a.value}->{b.value}", a, b, (a.value, b.value) in ALLOWED)
    for a, b in itertools.product(MessageState, MessageState)
]


def test_transition_table_matches_spec() -> None:
    table = {(a.value, b.value) for a, targets in MESSAGE_TRANSITIONS.items() for b in targets}
    assert table == ALLOWED


@pytest.mark.parametrize("case", TRANSITION_CASES, ids=[c.test_id for c in TRANSITION_CASES])
def test_transition_rules(store: RunStore, case: TransitionCase) -> None:
    start = MessageState.PARSED if case.old is MessageState.PARSED else MessageState.QUEUED
    msg = add(store, "k", state=start)
    for step in PATHS[case.old]:
        msg = store.transition(msg.id, step)
    assert msg.state is case.old
    if case.allowed:
        assert store.transition(msg.id, case.new, expect=case.old).state is case.new
    else:
        with pytest.raises(StoreError) as info:
            store.transition(msg.id, case.new, expect=case.old)
        assert f"{case.old.value} -> {case.new.value}" in str(info.value)
        assert store.get_message(msg.id) == msg


def test_next_queued_order_per_recipient(store: RunStore, clock: FakeClock) -> None:
    a1 = add(store, "a1", recipient="executer")
    b1 = add(store, "b1", recipient="planner")
    a2 = add(store, "a2", recipient="executer")
    add(store, "a3", recipient="executer", state=MessageState.PARSED)  # not yet sendable
    a4 = add(store, "a4", recipient="executer", ttl=10)
    assert store.next_queued("executer") == a1
    assert store.next_queued("planner") == b1
    assert store.next_queued("nobody") is None

    store.transition(a1.id, MessageState.DELIVERING)
    assert store.next_queued("executer") == a2
    assert [m.id for m in store.in_flight()] == [a1.id]
    # A retried message keeps its place in line: it is older than a2.
    store.transition(a1.id, MessageState.RETRIED)
    nq = store.next_queued("executer")
    assert nq is not None
    assert nq.id == a1.id
    assert store.in_flight() == []

    store.transition(a1.id, MessageState.DELIVERING)
    store.transition(a1.id, MessageState.DELIVERED)
    store.transition(a2.id, MessageState.DELIVERING)
    store.transition(a2.id, MessageState.DELIVERED)
    assert store.next_queued("executer") == a4
    clock.now += 11  # past a4's TTL: never handed out, even before expire_messages runs
    assert store.next_queued("executer") is None


def test_list_messages_filters(store: RunStore) -> None:
    store.create_task("t1", "r", max_rounds=1)
    m1 = add(store, "1", task_id="t1")
    m2 = add(store, "2", recipient="planner")
    m3 = add(store, "3", task_id="t1", state=MessageState.PARSED)
    assert store.list_messages() == [m1, m2, m3]
    assert store.list_messages(task_id="t1") == [m1, m3]
    assert store.list_messages(recipient="planner") == [m2]
    assert store.list_messages(state=MessageState.QUEUED) == [m1, m2]
    assert store.list_messages(state={MessageState.PARSED, MessageState.DEAD}) == [m3]
    assert store.list_messages(task_id="t1", state=MessageState.QUEUED) == [m1]
    assert store.count_messages("t1", "task") == 2  # in any state
    assert store.count_messages("t1", "plan") == store.count_messages("t2", "task") == 0


def test_expire_messages(store: RunStore, clock: FakeClock) -> None:
    short = add(store, "short", ttl=5)
    retried = add(store, "retried", ttl=5)
    store.transition(retried.id, MessageState.DELIVERING)
    store.transition(retried.id, MessageState.RETRIED)
    flying = add(store, "flying", ttl=5)
    store.transition(flying.id, MessageState.DELIVERING)
    long = add(store, "long", ttl=500)
    forever = add(store, "forever")

    assert store.expire_messages(clock.now + 1) == []
    expired = store.expire_messages(clock.now + 5)
    assert [m.id for m in expired] == [short.id, retried.id]
    assert all(m.state is MessageState.DEAD and m.last_error == "ttl expired" for m in expired)
    assert store.expire_messages(clock.now + 5) == []
    # In flight is the delivery code's business, not the TTL's.
    assert [m.id for m in store.list_messages(state=MessageState.DELIVERING)] == [flying.id]
    queued = store.list_messages(state=MessageState.QUEUED)
    assert [m.id for m in queued] == [long.id, forever.id]


# --- blocks and events -------------------------------------------------------------------


def test_record_block(store: RunStore) -> None:
    def record(accepted: bool, reason: str | None = None) -> bool:
        return store.record_block(
            agent="planner",
            task_id="t1",
            type="task",
            msg_id="m1",
            nonce="n1",
            dedupe_key="planner:n1:m1",
            header={"to": "executer"},
            body="do it",
            accepted=accepted,
            reason=reason,
        )

    assert record(accepted=False, reason="bad nonce")
    assert not record(accepted=False, reason="bad nonce")
    assert record(accepted=True)
    assert not record(accepted=True)
    blocks = store.list_blocks("t1")
    assert [(b.accepted, b.reason) for b in blocks] == [(False, "bad nonce"), (True, None)]
    assert blocks[1].header == {"to": "executer"}
    assert store.list_blocks("other") == []
    assert store.list_blocks() == blocks


def test_events(store: RunStore, clock: FakeClock) -> None:
    for i in range(5):
        clock.now += 1
        store.add_event("tick", task_id="t1" if i % 2 else None, detail=f"#{i}", data={"i": i})
    events = store.list_events()
    assert [e.detail for e in events] == ["#0", "#1", "#2", "#3", "#4"]
    assert [e.detail for e in store.list_events(limit=2)] == ["#3", "#4"]
    assert [e.detail for e in store.list_events("t1")] == ["#1", "#3"]
    assert (events[0].ts, events[0].data, events[0].agent) == (1001.0, {"i": 0}, None)


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
