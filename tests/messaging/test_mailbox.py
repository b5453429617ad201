"""The mail table: every state change allowed or refused, dedupe by id, TTL, inbox, audit."""

from __future__ import annotations

import itertools
import json
import pathlib
import typing as t

import pytest

from politerm.errors import MessageNotFound
from politerm.store import RunStore, iter_audit
from politerm.store.mail import Capability, Mail, Mailbox, MailKind
from politerm.store.mailstates import MAIL_TRANSITIONS, MailState, can_change


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def box(tmp_path: pathlib.Path, clock: Clock) -> t.Iterator[Mailbox]:
    with RunStore.open(tmp_path / "s" / "runs.sqlite3", clock=clock) as store:
        yield Mailbox(store)


def add(box: Mailbox, mail_id: str, **kw: t.Any) -> Mail:
    fields: dict[str, t.Any] = {
        "id": mail_id,
        "kind": MailKind.REQUEST,
        "session": "s",
        "sender": "ORCH",
        "sender_pane": "%1",
        "recipient": "W1",
        "recipient_pane": "%2",
        "capability": Capability.READONLY,
        "body_path": f"/m/{mail_id}.body",
        "size": 3,
        "sha256": "abc",
        "ttl": 60.0,
        "max_attempts": 3,
    }
    fields.update(kw)
    mail, _ = box.add(**fields)
    return mail


def force(box: Mailbox, mail_id: str, state: MailState) -> None:
    with box.store._writing() as c:
        c.execute("UPDATE mail SET state = ? WHERE id = ?", (state.value, mail_id))


PAIRS = list(itertools.product(MailState, MailState))


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a.value}->{b.value}" for a, b in PAIRS])
def test_every_state_change_is_applied_or_refused_by_the_table(
    box: Mailbox, old: MailState, new: MailState
) -> None:
    add(box, "m-1")
    force(box, "m-1", old)
    changed = box.transition("m-1", new, reason="because")
    allowed = new in MAIL_TRANSITIONS[old]
    assert can_change(old, new) is allowed
    current = box.require("m-1")
    if allowed:
        assert changed is not None
        assert current.state is new
        assert current.reason == "because"
    else:
        assert changed is None
        assert current.state is old


def test_final_states_have_no_way_out() -> None:
    for state in MailState:
        assert state.is_final is (not MAIL_TRANSITIONS[state])


def test_adding_an_id_twice_stores_it_once(box: Mailbox) -> None:
    first = add(box, "m-1")
    again, added = box.add(
        id="m-1",
        kind=MailKind.REQUEST,
        session="s",
        sender="X",
        sender_pane=None,
        recipient="W2",
        recipient_pane="%9",
        capability=Capability.WRITABLE,
        body_path="/other",
        size=1,
        sha256="x",
        ttl=1.0,
        max_attempts=1,
    )
    assert not added
    assert again == first
    assert len(box.select()) == 1


def test_unknown_message_is_an_error_naming_the_id(box: Mailbox) -> None:
    with pytest.raises(MessageNotFound, match="m-nope"):
        box.require("m-nope")
    with pytest.raises(MessageNotFound, match="m-nope"):
        box.transition("m-nope", MailState.DEAD)


def test_compare_and_set_lets_only_one_deliverer_win(box: Mailbox) -> None:
    add(box, "m-1")
    assert box.transition("m-1", MailState.DELIVERING, count_attempt=True) is not None
    assert box.transition("m-1", MailState.DELIVERING, count_attempt=True) is None
    assert box.require("m-1").attempts == 1


def test_acks_stamp_delivery_start_and_response(box: Mailbox, clock: Clock) -> None:
    add(box, "m-1")
    box.transition("m-1", MailState.DELIVERING)
    clock.now += 5
    box.transition("m-1", MailState.DELIVERED, delivered=True, started=True)
    clock.now += 5
    done = box.transition("m-1", MailState.RESPONDED, responded=True, response_path="/m/r")
    assert done is not None
    assert (done.delivered, done.started, done.responded) == (1005.0, 1005.0, 1010.0)
    assert done.response_path == "/m/r"


def test_ttl_selects_queued_and_delivered_messages_past_their_time(
    box: Mailbox, clock: Clock
) -> None:
    add(box, "m-q", ttl=10)
    add(box, "m-d", ttl=10)
    add(box, "m-late", ttl=100)
    box.transition("m-d", MailState.DELIVERING)
    box.transition("m-d", MailState.DELIVERED)
    assert box.due_to_expire() == []
    assert box.next_expiry() == 1010.0
    clock.now += 11
    assert sorted(m.id for m in box.due_to_expire()) == ["m-d", "m-q"]


def test_inbox_shows_received_messages_and_the_senders_dead_letters(box: Mailbox) -> None:
    add(box, "m-1")
    add(box, "m-2", recipient="ORCH", recipient_pane="%1", sender="W1", sender_pane="%2")
    add(box, "m-3")
    box.transition("m-3", MailState.DEAD, reason="receiver W1 exited")
    assert [m.id for m in box.inbox("W1")] == ["m-1", "m-3"]
    orch = box.inbox("ORCH")
    assert [m.id for m in orch] == ["m-2", "m-3"]
    assert orch[1].reason == "receiver W1 exited"


def test_queue_order_is_oldest_first_per_recipient(box: Mailbox, clock: Clock) -> None:
    add(box, "m-b")
    clock.now += 1
    add(box, "m-a")
    add(box, "m-other", recipient="W2")
    assert box.recipients_waiting() == ["W1", "W2"]
    nxt = box.next_queued("W1")
    assert nxt is not None
    assert nxt.id == "m-b"


def test_reasons_are_redacted_and_every_change_is_audited(box: Mailbox) -> None:
    add(box, "m-1")
    secret = "sk-proj-" + "a" * 30
    box.transition("m-1", MailState.DEAD, reason=f"screen said {secret}")
    assert secret not in (box.require("m-1").reason or "")
    lines = list(iter_audit(box.store.audit_path))
    kinds = [line["kind"] for line in lines]
    assert "mail.queued" in kinds
    assert "mail.state" in kinds
    assert secret not in json.dumps(lines)


def test_to_json_has_plain_values(box: Mailbox) -> None:
    data = add(box, "m-1").to_json()
    assert data["state"] == "queued"
    assert data["capability"] == "readonly"
    json.dumps(data)
