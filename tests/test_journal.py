"""The journal of turns in the run store: rows, attempts, links, states (real SQLite)."""

from __future__ import annotations

import pathlib
import typing as t

import pytest

from politerm.errors import TransitionRejected
from politerm.store import MIGRATIONS, RunStore, TurnEnd
from politerm.store.bridge import BridgeJournal
from politerm.store.db import connect
from politerm.store.epics import EpicStore, SessionRecord
from politerm.store.journal import (
    JOURNAL_TRANSITIONS,
    JournalState,
    Serves,
    Workflow,
    prompt_digest,
)
from tests.store_helpers import (
    add,
    clock_fixture,  # noqa: F401  # fixtures: pytest finds them here by their names
    store_fixture,  # noqa: F401
    store_path_fixture,  # noqa: F401
)

SECRET = "sk-ant-api03-" + "Q" * 40


def _serves(key: str = "k1") -> Serves:
    return Serves(Workflow.PIPELINE, "pipeline-step", ("run-1", key))


def test_a_row_is_handed_with_a_digest_and_a_redacted_head(store: RunStore) -> None:
    text = f"do it with {SECRET} now"
    row = store.journal_hand("step-1", _serves(), text=text, nonce="n1", start_line=3)
    assert row.state is JournalState.HANDED and row.open and row.attempt == 1
    assert row.digest == prompt_digest(text) and row.length == len(text)
    assert SECRET not in row.head and "[REDACTED" in row.head
    assert SECRET not in store.audit_path.read_text()
    assert (row.workflow, row.record, row.nonce, row.start_line) == (
        "pipeline",
        "pipeline-step",
        "n1",
        3,
    )


def test_an_open_row_goes_on_and_a_closed_one_counts_an_attempt(store: RunStore) -> None:
    first = store.journal_hand("step-1", _serves(), text="a")
    # a resumed attempt: the same row, not a second one
    assert store.journal_hand("step-1", _serves(), text="a").id == first.id
    store.journal_move(first.id, JournalState.FAILED, outcome="stranded")
    second = store.journal_hand("step-1", _serves(), text="a")
    assert (second.id != first.id, second.attempt) == (True, 2)
    other = store.journal_hand("step-2", _serves("k2"), text="b")
    assert other.attempt == 1
    assert [r.id for r in store.journal_open()] == [second.id, other.id]
    assert [r.id for r in store.journal_of("pipeline-step", ("run-1", "k1"))] == [
        first.id,
        second.id,
    ]


class Move(t.NamedTuple):
    old: JournalState
    new: JournalState

    @property
    def test_id(self) -> str:
        return f"{self.old.value}->{self.new.value}"


MOVES = [Move(a, b) for a in JournalState for b in JournalState if a is not b]


@pytest.mark.parametrize("move", MOVES, ids=[m.test_id for m in MOVES])
def test_every_move_is_allowed_or_rejected_by_the_table(store: RunStore, move: Move) -> None:
    row = store.journal_hand("a", _serves(move.test_id), text="x")
    path = {
        JournalState.HANDED: [],
        JournalState.DELIVERED: [JournalState.DELIVERED],
        JournalState.ENDED: [JournalState.DELIVERED, JournalState.ENDED],
        JournalState.FAILED: [JournalState.FAILED],
        JournalState.ABANDONED: [JournalState.ABANDONED],
    }[move.old]
    for state in path:
        store.journal_move(row.id, state, outcome="setup")
    if move.new in JOURNAL_TRANSITIONS[move.old]:
        moved = store.journal_move(row.id, move.new, outcome="o", proof={"rule": "r"})
        assert moved is not None and moved.state is move.new
        assert moved.proof == {"rule": "r"}
        stamp = moved.delivered if move.new is JournalState.DELIVERED else moved.ended
        assert stamp is not None
    else:
        with pytest.raises(TransitionRejected, match=f"{move.old.value} -> {move.new.value}"):
            store.journal_move(row.id, move.new)
        after = store.journal_row(row.id)
        assert after is not None and after.state is move.old


def test_each_table_record_points_to_its_row(store: RunStore) -> None:
    msg = add(store, "m1")
    row = store.journal_hand(
        "executer", Serves(Workflow.LOOP, "messages", (msg.id,)), text="p", nonce="n"
    )
    got = store.get_message(msg.id)
    assert got is not None and got.turn_id == row.id

    steps = BridgeJournal(store, "/q.json")
    steps.start("t1", 0, "agent", {"agent": "A"})
    row = store.journal_hand(
        "A", Serves(Workflow.BRIDGE, "bridge_steps", ("/q.json", "t1", 0)), text="p"
    )
    step = steps.get("t1", 0)
    assert step is not None and step.turn_id == row.id

    epics = EpicStore(store)
    epics.add_record(SessionRecord(id="s1", kind="session", epic="e", status="queued", queued=1))
    row = store.journal_hand("epic", Serves(Workflow.EPIC, "session_records", ("s1",)), text="p")
    # a later update of the record keeps its link
    epics.update_record("s1", status="running")
    with store._reading() as c:
        linked = c.execute("SELECT turn_id FROM session_records WHERE id = 's1'").fetchone()[0]
    assert linked == row.id


def test_ending_a_loop_turn_ends_its_rows(store: RunStore) -> None:
    msg = add(store, "m1")
    store.start_turn("executer", nonce="n1", task_id=None, message_id=msg.id, start_line=0)
    serves = Serves(Workflow.LOOP, "messages", (msg.id,))
    row = store.journal_hand("executer", serves, text="p", nonce="n1")
    store.journal_move(row.id, JournalState.DELIVERED, proof={"rule": "busy"})
    store.end_turn("executer", "n1", TurnEnd.ANSWERED)
    ended = store.journal_row(row.id)
    assert ended is not None and (ended.state, ended.outcome) == (JournalState.ENDED, "answered")

    # never confirmed: abandoned
    store.start_turn("executer", nonce="n2", task_id=None, message_id=msg.id, start_line=0)
    row = store.journal_hand("executer", serves, text="p", nonce="n2")
    store.end_turn("executer", "n2", TurnEnd.RESUMED)
    after = store.journal_row(row.id)
    assert after is not None and after.state is JournalState.ABANDONED


def test_an_older_store_gains_the_journal(store_path: pathlib.Path) -> None:
    conn = connect(store_path, migrations=MIGRATIONS[:7])
    conn.execute(
        "INSERT INTO mail (id, kind, session, sender, recipient, recipient_pane, capability,"
        " body_path, size, sha256, state, max_attempts, created, updated, expires)"
        " VALUES ('m1', 'request', 's', 'A', 'B', '%1', 'readonly', '/b', 1, 'x', 'queued',"
        " 3, 1, 1, 9)"
    )
    conn.close()
    with RunStore.open(store_path) as s:
        row = s.journal_hand("B", Serves(Workflow.MESSAGING, "mail", ("m1",)), text="p")
        with s._reading() as c:
            assert c.execute("SELECT turn_id FROM mail").fetchone()[0] == row.id


def test_an_agents_conversation_id_is_kept_on_its_newest_row(store: RunStore) -> None:
    assert store.journal_conversation("A") == ""
    assert store.journal_conversation("A", "c-1") == ""  # no row yet: nothing to keep it on
    first = store.journal_hand("A", _serves("k1"), text="p", conversation="c-1")
    store.journal_hand("B", _serves("k2"), text="p", conversation="b-1")
    assert store.journal_conversation("A") == "c-1"
    # named late (after the turn's end): the agent's newest row is told
    second = store.journal_hand("A", _serves("k3"), text="p")
    assert store.journal_conversation("A", "c-2") == "c-2"
    rows = [store.journal_row(r.id) for r in (first, second)]
    assert [r.conversation if r else None for r in rows] == ["c-1", "c-2"]
    assert store.journal_conversation("B") == "b-1"
