"""An agent loop's decisions, as tables: what a look calls for, without tmux or a store."""

from __future__ import annotations

import typing as t

import pytest

from politerm.agents.state import AgentState
from politerm.engine import agentstep
from politerm.engine.decide import EXECUTER, PLANNER
from politerm.store.models import MessageState, TaskState

READY, BUSY, EXITED = AgentState.READY, AgentState.BUSY, AgentState.EXITED


class Case(t.NamedTuple):
    test_id: str
    changes: dict[str, t.Any]
    expected: object


# --- after a look --------------------------------------------------------------------------

LOOK: dict[str, t.Any] = {
    "state": READY,
    "settled": True,
    "in_flight": False,
    "clear_pending": False,
    "turn_task": "T1",
    "task_state": TaskState.PLANNING,
}
LOOK_CASES = [
    Case("turn-goes-on", {}, None),
    Case("no-turn", {"turn_task": None, "task_state": None}, None),
    Case("exited", {"state": EXITED}, agentstep.AgentDied()),
    Case("exited-before-settling", {"state": EXITED, "settled": False}, agentstep.AgentDied()),
    Case("left-mid-delivery", {"settled": False, "in_flight": True}, agentstep.Settle()),
    Case("first-look-nothing-left", {"settled": False}, None),
    Case("box-to-clear", {"clear_pending": True}, agentstep.ClearBox()),
    Case("box-waits-while-busy", {"clear_pending": True, "state": BUSY}, None),
    Case(
        "settle-before-clear",
        {"settled": False, "in_flight": True, "clear_pending": True},
        agentstep.Settle(),
    ),
    Case("task-failed", {"task_state": TaskState.FAILED}, agentstep.EndStale()),
    Case("task-gone", {"task_state": None}, agentstep.EndStale()),
    Case("task-waits-for-user", {"task_state": TaskState.WAITING_USER}, agentstep.EndStale()),
]


@pytest.mark.parametrize("case", LOOK_CASES, ids=[c.test_id for c in LOOK_CASES])
def test_after_look(case: Case) -> None:
    assert agentstep.after_look(agentstep.Look(**{**LOOK, **case.changes})) == case.expected


# --- a turn answered without a block -------------------------------------------------------

SILENCE: dict[str, t.Any] = {
    "state": READY,
    "settling": False,
    "prompt_state": MessageState.DELIVERED,
    "idle_for": 2.0,
    "busy_seen": True,
    "turn_age": 10.0,
    "agent": PLANNER,
    "prompt_kind": "result",
    "task_state": TaskState.PLANNING,
}
SILENCE_CASES = [
    Case("planner-reports-in-prose", {}, True),
    Case("busy", {"state": BUSY}, False),
    Case("block-settling", {"settling": True}, False),
    Case("prompt-not-delivered", {"prompt_state": MessageState.DELIVERING}, False),
    Case("no-prompt", {"prompt_state": None}, False),
    Case("not-quiet-long-enough", {"idle_for": 1.0}, False),
    Case("never-busy-young-turn", {"busy_seen": False, "turn_age": 2.0}, False),
    Case("never-busy-old-turn", {"busy_seen": False, "turn_age": 3.0}, True),
    Case("executer-silence-is-no-report", {"agent": EXECUTER}, False),
    Case("answer-to-a-task-is-no-report", {"prompt_kind": "task"}, False),
    Case("task-over", {"task_state": TaskState.DONE}, False),
    Case("no-task", {"task_state": None}, False),
]


@pytest.mark.parametrize("case", SILENCE_CASES, ids=[c.test_id for c in SILENCE_CASES])
def test_answered_in_prose(case: Case) -> None:
    facts = agentstep.Silence(**{**SILENCE, **case.changes})
    assert agentstep.answered_in_prose(facts) is case.expected


# --- what to type next -----------------------------------------------------------------

SEND_CASES = [
    Case("idle-no-turn", {}, agentstep.SendNext(follow_ups_only=False)),
    Case("idle-in-turn-follow-ups-only", {"turn_open": True}, agentstep.SendNext(True)),
    Case("busy", {"state": BUSY}, None),
    Case("exited", {"state": EXITED}, None),
    Case("backoff-running", {"retry_in": 0.3}, None),
    Case("backoff-over", {"retry_in": -0.1}, agentstep.SendNext(False)),
]


@pytest.mark.parametrize("case", SEND_CASES, ids=[c.test_id for c in SEND_CASES])
def test_next_send(case: Case) -> None:
    facts: dict[str, t.Any] = {"state": READY, "retry_in": None, "turn_open": False}
    assert agentstep.next_send(**{**facts, **case.changes}) == case.expected


OUT: dict[str, t.Any] = {
    "kind": "plan",
    "task_state": TaskState.EXECUTING,
    "turn_nonce": None,
    "nonce": None,
    "has_text": False,
    "stranded_before": False,
    "box_text": False,
    "fresh": "new1",
}
BEGIN_CASES = [
    Case("first-attempt-new-nonce", {}, agentstep.Begin("new1", False, False, False)),
    Case("no-task", {"task_state": None}, agentstep.Begin("new1", False, False, False)),
    Case("task-ended", {"task_state": TaskState.ABORTED}, agentstep.Drop("task aborted")),
    Case("task-done", {"task_state": TaskState.DONE}, agentstep.Drop("task done")),
    Case(
        "nudge-joins-open-turn",
        {"kind": "nudge", "turn_nonce": "t1"},
        agentstep.Begin("t1", False, False, True),
    ),
    Case(
        "retry-joins-open-turn-same-text",
        {"kind": "retry", "turn_nonce": "t1", "nonce": "t1", "has_text": True},
        agentstep.Begin("t1", True, False, True),
    ),
    Case(
        "nudge-without-turn-is-its-own",
        {"kind": "nudge"},
        agentstep.Begin("new1", False, False, False),
    ),
    Case(
        "stranded-text-in-box-submitted",
        {"nonce": "n1", "has_text": True, "stranded_before": True, "box_text": True},
        agentstep.Begin("n1", True, True, False),
    ),
    Case(
        "stranded-box-empty-typed-again-new-nonce",
        {"nonce": "n1", "has_text": True, "stranded_before": True},
        agentstep.Begin("new1", False, False, False),
    ),
    Case(
        "blocked-before-typed-again-new-nonce",
        {"nonce": "n1", "has_text": True, "box_text": True},
        agentstep.Begin("new1", False, False, False),
    ),
]


@pytest.mark.parametrize("case", BEGIN_CASES, ids=[c.test_id for c in BEGIN_CASES])
def test_begin_delivery(case: Case) -> None:
    assert agentstep.begin_delivery(agentstep.Outgoing(**{**OUT, **case.changes})) == (
        case.expected
    )


DROPPED = agentstep.Drop("its task ended before the prompt was typed")
HANDOFF_CASES = [
    Case("stands", {}, None),
    Case("no-task", {"task_state": None}, None),
    Case("task-aborted", {"task_state": TaskState.ABORTED}, DROPPED),
    Case("turn-gone", {"turn_nonce": None}, DROPPED),
    Case("another-turn", {"turn_nonce": "other"}, DROPPED),
]


@pytest.mark.parametrize("case", HANDOFF_CASES, ids=[c.test_id for c in HANDOFF_CASES])
def test_handoff_stands(case: Case) -> None:
    facts: dict[str, t.Any] = {
        "turn_nonce": "n1",
        "nonce": "n1",
        "task_state": TaskState.EXECUTING,
    }
    assert agentstep.handoff_stands(**{**facts, **case.changes}) == case.expected


RECIPIENT: dict[str, t.Any] = {
    "dead": False,
    "state": READY,
    "settled": True,
    "handed": False,
    "turn_open": False,
    "clear_pending": False,
    "stopping": False,
}
RECIPIENT_CASES = [
    Case("free", {}, True),
    Case("dead", {"dead": True}, False),
    Case("busy", {"state": BUSY}, False),
    Case("not-settled", {"settled": False}, False),
    Case("handed-already", {"handed": True}, False),
    Case("own-turn", {"turn_open": True}, False),
    Case("box-to-clear", {"clear_pending": True}, False),
    Case("router-stopping", {"stopping": True}, False),
]


@pytest.mark.parametrize("case", RECIPIENT_CASES, ids=[c.test_id for c in RECIPIENT_CASES])
def test_takes_handoff(case: Case) -> None:
    recipient = agentstep.Recipient(**{**RECIPIENT, **case.changes})
    assert agentstep.takes_handoff(recipient) is case.expected


# --- how long the loop sleeps ----------------------------------------------------------

SLEEP: dict[str, t.Any] = {
    "now": 100.0,
    "limit_due": None,
    "turn_open": False,
    "settling": False,
    "block_settle": 0.02,
    "state": READY,
    "retry_at": None,
    "transcript_until": None,
    "next_change": None,
    "idle_bound": 300.0,
}
SLEEP_CASES = [
    Case("idle", {}, 300.0),
    Case("limit-reset-soon", {"limit_due": 12.0}, 12.0),
    Case("limit-reset-now-floor", {"limit_due": 0.0}, 0.5),
    Case("limit-reset-far-capped", {"limit_due": 9000.0}, 300.0),
    Case("turn-block-settling", {"turn_open": True, "settling": True}, 0.02),
    Case("turn-ready-silence", {"turn_open": True}, 0.5),
    Case("turn-busy", {"turn_open": True, "state": BUSY}, 2.0),
    Case("retry-due-later", {"retry_at": 104.0}, 4.0),
    Case("retry-overdue-floor", {"retry_at": 90.0}, 0.05),
    Case("transcript-catching-up", {"transcript_until": 120.0}, 2.0),
    Case("transcript-grace-over", {"transcript_until": 99.0}, 300.0),
    Case("state-changes-by-silence", {"next_change": 101.5}, 1.5),
    Case("retry-then-change-earlier", {"retry_at": 110.0, "next_change": 103.0}, 3.0),
]


@pytest.mark.parametrize("case", SLEEP_CASES, ids=[c.test_id for c in SLEEP_CASES])
def test_sleep_bound(case: Case) -> None:
    assert agentstep.sleep_bound(agentstep.Sleep(**{**SLEEP, **case.changes})) == case.expected


LEFT_OVER_CASES = [
    Case("taken", {"resumed": "delivered"}, agentstep.Taken()),
    Case(
        "taken-though-task-ended",
        {"resumed": "delivered", "task_state": TaskState.ABORTED},
        agentstep.Taken(),
    ),
    Case("in-the-box-submitted", {"resumed": "pasted"}, agentstep.Retype(pasted=True)),
    Case("nothing-typed-again", {}, agentstep.Retype(pasted=False)),
    Case("no-task-typed-again", {"task_state": None}, agentstep.Retype(pasted=False)),
    Case(
        "task-ended-never-typed",
        {"task_state": TaskState.FAILED},
        agentstep.Abandon("task failed", clear_box=False),
    ),
    Case(
        "task-ended-box-cleared",
        {"resumed": "pasted", "task_state": TaskState.DONE},
        agentstep.Abandon("task done", clear_box=True),
    ),
]


@pytest.mark.parametrize("case", LEFT_OVER_CASES, ids=[c.test_id for c in LEFT_OVER_CASES])
def test_left_over_fate(case: Case) -> None:
    facts: dict[str, t.Any] = {"resumed": None, "task_state": TaskState.EXECUTING}
    assert agentstep.left_over_fate(**{**facts, **case.changes}) == case.expected
