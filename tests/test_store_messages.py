"""The durable run store's messages: dedupe, the transition table, queues, TTLs, blocks and
events (real SQLite files in tmp_path, no mocks)."""

from __future__ import annotations

import itertools
import typing as t

import pytest

from politerm.errors import StoreError
from politerm.store import MESSAGE_TRANSITIONS, MessageState, RunStore
from tests.store_helpers import (
    FakeClock,
    add,
    clock_fixture,  # noqa: F401  # fixtures: pytest finds them here by their names
    store_fixture,  # noqa: F401
    store_path_fixture,  # noqa: F401
)

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
    assert [m.id for m in store.list_messages(state=MessageState.DELIVERING)] == [a1.id]
    # A retried message keeps its place in line: it is older than a2.
    store.transition(a1.id, MessageState.RETRIED)
    nq = store.next_queued("executer")
    assert nq is not None
    assert nq.id == a1.id
    assert store.list_messages(state=MessageState.DELIVERING) == []

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
