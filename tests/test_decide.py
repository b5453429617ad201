"""The router's decisions, as tables: (facts, event) → actions, without tmux or a store."""

from __future__ import annotations

import typing as t

import pytest

from politerm.driver.delivery import Outcome
from politerm.engine import decide
from politerm.engine.decide import EXECUTER, PLANNER
from politerm.protocol.block import Block
from politerm.store.models import TaskState, TurnEnd

# --- a delivery ended ------------------------------------------------------------------------


class DeliveryCase(t.NamedTuple):
    test_id: str
    outcome: Outcome
    submitted: bool
    attempts: int
    follow_up: bool
    task_id: str | None
    expected: tuple[decide.DeliveryAction, ...]


_WHY = "could not deliver the plan message to EXECUTER ({}: rule); last screen: > plan"
DELIVERY_CASES = [
    DeliveryCase(
        "delivered-starts-clock", Outcome.DELIVERED, True, 1, False, "T1", (decide.Confirmed(True),)
    ),
    DeliveryCase(
        "follow-up-keeps-clock", Outcome.DELIVERED, True, 1, True, "T1", (decide.Confirmed(False),)
    ),
    DeliveryCase(
        "no-task-no-clock", Outcome.DELIVERED, True, 1, False, None, (decide.Confirmed(False),)
    ),
    DeliveryCase(
        "blocked-after-enter-counts",
        Outcome.BLOCKED,
        True,
        1,
        False,
        "T1",
        (decide.Confirmed(True),),
    ),
    DeliveryCase(
        "agent-exited", Outcome.AGENT_EXITED, False, 1, False, "T1", (decide.AgentGone(),)
    ),
    DeliveryCase(
        "stranded-retried",
        Outcome.STRANDED,
        False,
        2,
        False,
        "T1",
        (decide.EndTurn(TurnEnd.NOT_DELIVERED), decide.RetryLater(2.0, "stranded: rule")),
    ),
    DeliveryCase(
        "blocked-follow-up-retried-turn-open",
        Outcome.BLOCKED,
        False,
        1,
        True,
        "T1",
        (decide.RetryLater(1.0, "blocked: rule"),),
    ),
    DeliveryCase(
        "stranded-dead-lettered-box-cleared-task-failed",
        Outcome.STRANDED,
        False,
        3,
        False,
        "T1",
        (
            decide.EndTurn(TurnEnd.NOT_DELIVERED),
            decide.DeadLetter("stranded after 3 attempts: rule", clear_input=True),
            decide.FailTask("T1", _WHY.format("stranded"), TurnEnd.DEAD_LETTER),
        ),
    ),
    DeliveryCase(
        "blocked-dead-lettered-box-kept",
        Outcome.BLOCKED,
        False,
        3,
        False,
        "T1",
        (
            decide.EndTurn(TurnEnd.NOT_DELIVERED),
            decide.DeadLetter("blocked after 3 attempts: rule", clear_input=False),
            decide.FailTask("T1", _WHY.format("blocked"), TurnEnd.DEAD_LETTER),
        ),
    ),
    DeliveryCase(
        "dead-letter-without-task",
        Outcome.STRANDED,
        False,
        3,
        True,
        None,
        (decide.DeadLetter("stranded after 3 attempts: rule", clear_input=True),),
    ),
]


@pytest.mark.parametrize("case", DELIVERY_CASES, ids=[c.test_id for c in DELIVERY_CASES])
def test_delivery_ended(case: DeliveryCase) -> None:
    d = decide.Delivery(
        case.outcome,
        case.submitted,
        "rule",
        "> plan",
        EXECUTER,
        "plan",
        attempts=case.attempts,
        max_attempts=3,
        follow_up=case.follow_up,
        task_id=case.task_id,
    )
    assert decide.delivery_ended(d) == case.expected


def test_retry_backoff_doubles_to_its_cap() -> None:
    assert [decide.retry_backoff(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0]


# --- a step's clock --------------------------------------------------------------------------


class ClockCase(t.NamedTuple):
    test_id: str
    now: float
    changes: dict[str, t.Any]
    expected: decide.ClockAction | None


_RESUMABLE = (
    f"agent {EXECUTER} exited before it got its prompt for task T1; "
    "run `poli up --resume` to restart it and continue"
)
CLOCK_CASES = [
    ClockCase("early-nothing", 110.0, {}, None),
    ClockCase("nudge-at-fraction", 150.0, {}, decide.Nudge()),
    ClockCase("nudged-waits-for-deadline", 150.0, {"nudged": True}, None),
    ClockCase("retry-at-deadline", 200.0, {"nudged": True}, decide.RetryStep(300.0, 1)),
    ClockCase("timeout-after-retry", 200.0, {"nudged": True, "retries": 1}, decide.TimedOut(100.0)),
    ClockCase("task-gone", 200.0, {"task_state": None}, decide.ClearClock()),
    ClockCase("task-done", 200.0, {"task_state": TaskState.DONE}, decide.ClearClock()),
    ClockCase("waiting-user-kept", 200.0, {"task_state": TaskState.WAITING_USER}, None),
    ClockCase("waiting-approval-kept", 200.0, {"task_state": TaskState.WAITING_APPROVAL}, None),
    ClockCase("undelivered-no-clock", 500.0, {"undelivered": True}, None),
    ClockCase(
        "undelivered-dead-agent",
        500.0,
        {"undelivered": True, "sender_dead": True},
        decide.FailTask("T1", _RESUMABLE, TurnEnd.AGENT_DIED, resumable=TaskState.EXECUTING),
    ),
    ClockCase("limit-pauses", 170.0, {"limited": True}, decide.PauseClock(30.0)),
    ClockCase("limit-past-deadline-keeps-zero", 250.0, {"limited": True}, decide.PauseClock(0.0)),
    ClockCase("limit-paused-stands", 900.0, {"limited": True, "paused_left": 30.0}, None),
    ClockCase("limit-ended-resumes", 900.0, {"paused_left": 30.0}, decide.ResumeClock(930.0, 30.0)),
]


@pytest.mark.parametrize("case", CLOCK_CASES, ids=[c.test_id for c in CLOCK_CASES])
def test_step_clock(case: ClockCase) -> None:
    facts: dict[str, t.Any] = {
        "task_id": "T1",
        "task_state": TaskState.EXECUTING,
        "sender": EXECUTER,
        "deadline": 200.0,
        "total": 100.0,
        "nudged": False,
        "nudge_fraction": 0.5,
        "undelivered": False,
        "sender_dead": False,
        "limited": False,
        "paused_left": None,
        "retries": 0,
    }
    assert decide.step_clock(decide.StepClock(**{**facts, **case.changes}), case.now) == (
        case.expected
    )


# --- a block read in a turn ------------------------------------------------------------------


class BlockCase(t.NamedTuple):
    test_id: str
    author: str
    block: Block
    changes: dict[str, t.Any]
    expected: tuple[decide.BlockAction, ...]


_OK = decide.Record("T1", accepted=True)
BLOCK_CASES = [
    BlockCase(
        "plan-forwarded",
        PLANNER,
        Block(EXECUTER, "plan", "T1", "do it"),
        {},
        (_OK, decide.Forward(EXECUTER, "plan", TaskState.EXECUTING, "result")),
    ),
    BlockCase(
        "result-forwarded",
        EXECUTER,
        Block("planner", "result", "T1", "did it"),
        {},
        (_OK, decide.Forward(PLANNER, "result", TaskState.PLANNING, "plan")),
    ),
    BlockCase(
        "other-type-is-a-message",
        PLANNER,
        Block(EXECUTER, "note", "T1", "fyi"),
        {},
        (_OK, decide.Forward(EXECUTER, "message", TaskState.EXECUTING, "plan")),
    ),
    BlockCase(
        "final-to-user-done",
        PLANNER,
        Block("USER", "final", "T1", "all done"),
        {},
        (_OK, decide.Done("all done")),
    ),
    BlockCase(
        "done-to-nobody-done",
        PLANNER,
        Block("BOSS", "done", "T1", "ok"),
        {},
        (_OK, decide.Done("ok")),
    ),
    BlockCase(
        "question-asks",
        PLANNER,
        Block("USER", "question", "T1", "why?"),
        {},
        (_OK, decide.Ask("why?")),
    ),
    BlockCase("status-shown-only", EXECUTER, Block("USER", "status", "T1", "50%"), {}, (_OK,)),
    BlockCase(
        "own-status-id",
        EXECUTER,
        Block("USER", "status", "T1-status-2", "50%"),
        {"own_status": True, "task": None},
        (_OK,),
    ),
    BlockCase(
        "ended-task-ends-turn",
        EXECUTER,
        Block(PLANNER, "result", "T1", "late"),
        {"task": decide.TaskFacts("T1", TaskState.ABORTED, 3)},
        (_OK, decide.EndAnswered()),
    ),
    BlockCase(
        "unknown-id-rejected",
        PLANNER,
        Block(EXECUTER, "plan", "T9", "x"),
        {"task": None},
        (
            decide.Record("T1", accepted=False, reason="id 'T9': unknown task id"),
            decide.Rejected("T1", "block id T9: unknown task id"),
        ),
    ),
    BlockCase(
        "other-tasks-id-rejected",
        PLANNER,
        Block(EXECUTER, "plan", "T2", "x"),
        {"task": decide.TaskFacts("T2", TaskState.PLANNING, 3)},
        (
            decide.Record("T1", accepted=False, reason="id 'T2': belongs to task T1"),
            decide.Rejected("T1", "block id T2: belongs to task T1"),
        ),
    ),
    BlockCase(
        "to-itself-rejected",
        PLANNER,
        Block(PLANNER, "plan", "T1", "x"),
        {},
        (
            _OK,
            decide.Rejected(
                "T1",
                "block to 'PLANNER': PLANNER addressed its plan block to itself; "
                "a plan block goes to EXECUTER",
            ),
        ),
    ),
    BlockCase(
        "nobody-of-that-name-rejected",
        PLANNER,
        Block("BOB", "plan", "T1", "x"),
        {},
        (
            _OK,
            decide.Rejected(
                "T1",
                "block to 'BOB': no agent is named 'BOB' (agents: PLANNER, EXECUTER; "
                "USER); a plan block goes to EXECUTER",
            ),
        ),
    ),
    BlockCase(
        "round-limit",
        PLANNER,
        Block(EXECUTER, "plan", "T1", "again"),
        {"rounds": 3},
        (_OK, decide.RoundLimit("round limit 3 reached: PLANNER sent plan 4 for task T1")),
    ),
    BlockCase(
        "round-limit-re-read-forwarded",
        PLANNER,
        Block(EXECUTER, "plan", "T1", "again"),
        {"rounds": 3, "forwarded": True},
        (_OK, decide.Forward(EXECUTER, "plan", TaskState.EXECUTING, "result")),
    ),
]


@pytest.mark.parametrize("case", BLOCK_CASES, ids=[c.test_id for c in BLOCK_CASES])
def test_block_effects(case: BlockCase) -> None:
    facts: dict[str, t.Any] = {
        "agent": case.author,
        "agents": (PLANNER, EXECUTER),
        "turn_task": "T1",
        "own_status": False,
        "task": decide.TaskFacts("T1", TaskState.PLANNING, 3),
        "rounds": 1,
        "forwarded": False,
    }
    assert decide.block_effects(decide.BlockFacts(**{**facts, **case.changes}), case.block) == (
        case.expected
    )


# --- an agent exited, the server gone --------------------------------------------------------


def test_dead_agent_fails_the_tasks_it_had_resumably() -> None:
    tasks = [
        decide.Involvement("T1", TaskState.EXECUTING, EXECUTER),  # its step
        decide.Involvement("T2", TaskState.PLANNING, PLANNER),  # its open turn
        decide.Involvement("T3", TaskState.PLANNING, PLANNER),  # not its
        decide.Involvement("T4", TaskState.PENDING, EXECUTER),  # nothing sent yet
    ]
    failed = decide.tasks_of_dead_agent(EXECUTER, "$ exit", "T2", tasks)
    assert [(f.task_id, f.resumable, f.reason) for f in failed] == [
        ("T1", TaskState.EXECUTING, TurnEnd.AGENT_DIED),
        ("T2", TaskState.PLANNING, TurnEnd.AGENT_DIED),
    ]
    assert failed[0].why == (
        "agent EXECUTER exited during the exec step of task T1 ($ exit); "
        "run `poli up --resume` to restart it and continue"
    )


def test_server_gone_fails_every_started_task() -> None:
    tasks = [
        decide.Involvement("T1", TaskState.WAITING_USER, None),
        decide.Involvement("T2", TaskState.PENDING, None),
    ]
    (failed,) = decide.server_gone_failures("killed", tasks)
    assert (failed.task_id, failed.resumable) == ("T1", TaskState.WAITING_USER)
    assert failed.why.startswith("the tmux server is gone (killed)")


# --- an approval asked or answered -----------------------------------------------------------


class ApprovalCase(t.NamedTuple):
    test_id: str
    task_state: TaskState
    asking: str | None
    waiting: bool
    unknown: bool
    expected: decide.AwaitApproval | decide.Approved | None


APPROVAL_CASES = [
    ApprovalCase("asks", TaskState.EXECUTING, "q", True, False, decide.AwaitApproval("q")),
    ApprovalCase("asked-already", TaskState.WAITING_APPROVAL, "q", True, False, None),
    ApprovalCase("task-over", TaskState.DONE, "q", True, False, None),
    ApprovalCase("answered", TaskState.WAITING_APPROVAL, None, False, False, decide.Approved()),
    ApprovalCase("still-waiting", TaskState.WAITING_APPROVAL, None, True, False, None),
    ApprovalCase("unreadable", TaskState.WAITING_APPROVAL, None, False, True, None),
    ApprovalCase("nothing", TaskState.PLANNING, None, False, False, None),
]


@pytest.mark.parametrize("case", APPROVAL_CASES, ids=[c.test_id for c in APPROVAL_CASES])
def test_approval_change(case: ApprovalCase) -> None:
    got = decide.approval_change(case.task_state, case.asking, case.waiting, case.unknown)
    assert got == case.expected
