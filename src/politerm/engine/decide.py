"""The router's decisions: pure functions of (what it knows, one event) → actions.

Nothing here reads the store, looks at a screen or types a key. Each function takes typed,
immutable facts (a task's state, an expectation's clock, a delivery's outcome, a block's
header) and returns the actions that follow, as values; the router's effects
(:mod:`politerm.engine.routebase`, :mod:`politerm.engine.sending`,
:mod:`politerm.engine.deadlines`, :mod:`politerm.engine.effects`) gather the facts and
carry the actions out through the store and the driver. So every decision is tested as a
table, without tmux (``tests/test_decide.py``).

Events and their decisions:

- a delivery ended (delivered, stranded, blocked, agent exited) → :func:`delivery_ended`;
- a store tick over a step's clock (nudge time, deadline, usage limit) → :func:`step_clock`;
- a block read in a turn → :func:`block_effects`;
- an agent exited → :func:`tasks_of_dead_agent`;
- an approval asked or answered → :func:`approval_change`.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.driver.delivery import Outcome
from politerm.store.models import TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.protocol.block import Block

PLANNER = "PLANNER"
EXECUTER = "EXECUTER"
USER_TARGETS = frozenset({"USER", "ORCH", "ORCHESTRATOR", "HUMAN"})
FINAL_TYPES = frozenset({"final", "done"})
FOLLOW_UPS = ("nudge", "retry")
ACTIVE = frozenset(
    {TaskState.PENDING, TaskState.PLANNING, TaskState.EXECUTING, TaskState.WAITING_APPROVAL}
)
# A step's clock runs only in these task states (the others wait for the user, or are over).
_CLOCKED = frozenset({TaskState.PLANNING, TaskState.EXECUTING, TaskState.PENDING})

RETRY_FIRST = 1.0
RETRY_MAX = 15.0


def retry_backoff(attempts: int) -> float:
    """Seconds before a delivery that did not get through is tried again.

    Examples
    --------
    >>> [retry_backoff(n) for n in (1, 2, 3, 5, 9)]
    [1.0, 2.0, 4.0, 15.0, 15.0]
    """
    return min(RETRY_MAX, RETRY_FIRST * 2.0 ** max(0, attempts - 1))


def step_name(agent: str) -> str:
    """The step an agent's turn is: ``plan`` for the planner, ``exec`` for anyone else.

    Examples
    --------
    >>> step_name(PLANNER), step_name(EXECUTER)
    ('plan', 'exec')
    """
    return "plan" if agent == PLANNER else "exec"


# --- actions -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FailTask:
    """Fail the task (its turns end with ``reason``); ``resumable``: the state to go back to."""

    task_id: str
    why: str
    reason: TurnEnd
    resumable: TaskState | None = None


@dataclasses.dataclass(frozen=True)
class Confirmed:
    """The prompt reached the agent: DELIVERED, its turn WAITING; maybe its step's clock starts."""

    restart_clock: bool


@dataclasses.dataclass(frozen=True)
class AgentGone:
    """The agent exited during the delivery: the message waits (RETRIED) and the agent is dead."""


@dataclasses.dataclass(frozen=True)
class EndTurn:
    """End the agent's open turn (of this delivery) for ``reason``."""

    reason: TurnEnd


@dataclasses.dataclass(frozen=True)
class RetryLater:
    """Try the delivery again after ``after`` seconds (RETRIED, with this error)."""

    after: float
    error: str


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """Give the message up (DEAD); ``clear_input``: its text is left in the agent's box."""

    error: str
    clear_input: bool


DeliveryAction = Confirmed | AgentGone | EndTurn | RetryLater | DeadLetter | FailTask


@dataclasses.dataclass(frozen=True)
class ClearClock:
    """Forget the step's expectation (its task is gone or over)."""


@dataclasses.dataclass(frozen=True)
class PauseClock:
    """The step's agent is limited: keep the ``left`` seconds until it is free again."""

    left: float


@dataclasses.dataclass(frozen=True)
class ResumeClock:
    """The agent's limit ended: the step's deadline is ``deadline`` (``left`` from now)."""

    deadline: float
    left: float


@dataclasses.dataclass(frozen=True)
class Nudge:
    """Send the step's agent a nudge (a follow-up of its turn)."""


@dataclasses.dataclass(frozen=True)
class RetryStep:
    """The deadline passed once: send the prompt again and give the step ``deadline``."""

    deadline: float
    retries: int


@dataclasses.dataclass(frozen=True)
class TimedOut:
    """The deadline passed after the retry: the task fails (the caller says what happened)."""

    total: float


ClockAction = ClearClock | PauseClock | ResumeClock | Nudge | RetryStep | TimedOut | FailTask


# --- a delivery ended ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What the router knows of a message whose delivery just ended (the event).

    Attributes
    ----------
    outcome, submitted, rule, evidence
        The driver's report: how it ended, whether Enter went in, the rule that decided
        and the last screen lines (joined).
    recipient, kind
        The agent and the message's type.
    attempts, max_attempts
        Deliveries tried so far (this one included) and the routing limit.
    follow_up
        A nudge or retry of an open turn (which is not its own turn).
    task_id
        The message's task, if it has one that still exists.
    """

    outcome: Outcome
    submitted: bool
    rule: str
    evidence: str
    recipient: str
    kind: str
    attempts: int
    max_attempts: int
    follow_up: bool
    task_id: str | None


def delivery_ended(d: Delivery) -> tuple[DeliveryAction, ...]:
    """What follows a delivery's outcome: confirm it, wait for a retry, or give it up.

    Examples
    --------
    >>> d = Delivery(Outcome.STRANDED, False, "enter ignored", "> hi", "EXECUTER", "plan",
    ...              attempts=1, max_attempts=3, follow_up=False, task_id="T1")
    >>> delivery_ended(d)
    (EndTurn(reason=<TurnEnd.NOT_DELIVERED: 'not_delivered'>), RetryLater(after=1.0, \
error='stranded: enter ignored'))
    """
    if d.outcome is Outcome.DELIVERED or (d.outcome is Outcome.BLOCKED and d.submitted):
        return (Confirmed(restart_clock=d.task_id is not None and not d.follow_up),)
    if d.outcome is Outcome.AGENT_EXITED:
        return (AgentGone(),)
    # STRANDED, or BLOCKED before submitting: try again later, then dead-letter.
    ended: tuple[DeliveryAction, ...] = () if d.follow_up else (EndTurn(TurnEnd.NOT_DELIVERED),)
    if d.attempts < d.max_attempts:
        return (*ended, RetryLater(retry_backoff(d.attempts), f"{d.outcome.value}: {d.rule}"))
    error = f"{d.outcome.value} after {d.attempts} attempts: {d.rule}"
    actions = (*ended, DeadLetter(error, clear_input=d.outcome is Outcome.STRANDED))
    if d.task_id is None:
        return actions
    why = (
        f"could not deliver the {d.kind} message to {d.recipient} "
        f"({d.outcome.value}: {d.rule}); last screen: {d.evidence}"
    )
    return (*actions, FailTask(d.task_id, why, TurnEnd.DEAD_LETTER))


# --- a step's clock --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepClock:
    """One expectation (a step waiting for an agent's block) as a store tick sees it.

    Attributes
    ----------
    task_id, task_state
        The task (``task_state`` None: the task is gone).
    sender
        The agent whose block the step waits for.
    deadline, total, nudged, nudge_fraction
        The step's deadline, its length, whether the nudge went, and when it goes.
    undelivered
        The prompt that starts the step has not reached the agent yet (its clock waits).
    sender_dead
        The agent exited.
    limited
        The agent waits for a usage limit to reset.
    paused_left
        Seconds the step had left when its agent's limit began (None: no pause kept).
    retries
        Times the step's prompt was sent again after its deadline.
    """

    task_id: str
    task_state: TaskState | None
    sender: str
    deadline: float
    total: float
    nudged: bool
    nudge_fraction: float
    undelivered: bool
    sender_dead: bool
    limited: bool
    paused_left: float | None
    retries: int


def step_clock(c: StepClock, now: float) -> ClockAction | None:
    """What a step's clock calls for at ``now``: nothing, or one action.

    A step's clock starts when its prompt is confirmed delivered, stands still while its
    agent is limited, nudges once at ``nudge_fraction`` of the step, sends the prompt again
    once at the deadline, and times the task out at the next.

    Examples
    --------
    >>> c = StepClock("T1", TaskState.PLANNING, PLANNER, deadline=100.0, total=100.0,
    ...               nudged=False, nudge_fraction=0.5, undelivered=False, sender_dead=False,
    ...               limited=False, paused_left=None, retries=0)
    >>> step_clock(c, 10.0) is None, step_clock(c, 50.0)
    (True, Nudge())
    """
    if c.task_state not in _CLOCKED:
        return ClearClock() if c.task_state is None or c.task_state.is_terminal else None
    if c.undelivered:
        if not c.sender_dead:
            return None  # its clock starts at confirmed delivery
        why = (
            f"agent {c.sender} exited before it got its prompt for task {c.task_id}; "
            "run `poli up --resume` to restart it and continue"
        )
        return FailTask(c.task_id, why, TurnEnd.AGENT_DIED, resumable=c.task_state)
    if c.limited:
        return None if c.paused_left is not None else PauseClock(max(0.0, c.deadline - now))
    if c.paused_left is not None:
        return ResumeClock(now + c.paused_left, c.paused_left)
    started = c.deadline - c.total
    if not c.nudged and now >= started + c.total * c.nudge_fraction:
        return Nudge()
    if now < c.deadline:
        return None
    if c.retries < 1:
        return RetryStep(now + c.total, c.retries + 1)
    return TimedOut(c.total)


# --- a block read in a turn ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Record:
    """Record the block (once per dedupe key) under ``task_id``; shown when accepted."""

    task_id: str | None
    accepted: bool
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class Rejected:
    """Tell the user why the block goes nowhere (a ``rejected`` event)."""

    task_id: str | None
    detail: str


@dataclasses.dataclass(frozen=True)
class EndAnswered:
    """The turn is answered: end it (the task is over, or the block was its answer)."""


@dataclasses.dataclass(frozen=True)
class Ask:
    """The block is a question for the user: the task waits for the answer."""

    question: str


@dataclasses.dataclass(frozen=True)
class Done:
    """The block is the final report: the task is done."""

    report: str


@dataclasses.dataclass(frozen=True)
class RoundLimit:
    """One plan too many: the task fails at its round limit."""

    why: str


@dataclasses.dataclass(frozen=True)
class Forward:
    """Forward the block to ``target`` as a ``kind`` message; the task goes ``state``."""

    target: str
    kind: str
    state: TaskState
    expect: str


BlockAction = Record | Rejected | EndAnswered | Ask | Done | RoundLimit | Forward


@dataclasses.dataclass(frozen=True)
class TaskFacts:
    """A task as a decision needs it."""

    id: str
    state: TaskState
    max_rounds: int


@dataclasses.dataclass(frozen=True)
class BlockFacts:
    """What the router knows when a block of ``agent``'s turn is to take effect.

    Attributes
    ----------
    agent, agents
        The block's author, and every agent the router routes to.
    turn_task
        The task of the turn the block answers (None: a turn of no task).
    own_status
        The block is a status block with its own id (``<task>-status-N``).
    task
        The task the block's id names, if there is one.
    rounds
        Plans forwarded for that task so far.
    forwarded
        This block was forwarded before (read again after a restart).
    """

    agent: str
    agents: tuple[str, ...]
    turn_task: str | None
    own_status: bool
    task: TaskFacts | None
    rounds: int
    forwarded: bool


def agent_named(agents: t.Iterable[str], name: str) -> str | None:
    """The agent called ``name`` (any case), if there is one.

    Examples
    --------
    >>> agent_named(["PLANNER", "EXECUTER"], "executer"), agent_named(["PLANNER"], "BOB")
    ('EXECUTER', None)
    """
    upper = name.upper()
    return next((a for a in agents if a.upper() == upper), None)


def wrong_address(agents: t.Sequence[str], name: str, block: Block, target: str | None) -> str:
    """Why ``name``'s block addressed to ``target`` (None: no agent of that name) goes nowhere."""
    others = [a for a in agents if a != name]
    hint = {"plan": EXECUTER, "result": PLANNER}.get(block.type)
    where = (
        f"a {block.type} block goes to {hint}"
        if hint is not None and hint in agents
        else f"address {' or '.join([*others, 'USER'])}"
    )
    if target == name:
        return f"{name} addressed its {block.type} block to itself; {where}"
    return f"no agent is named {block.to!r} (agents: {', '.join(agents)}; USER); {where}"


def block_effects(f: BlockFacts, block: Block) -> tuple[BlockAction, ...]:
    """What one block does: record it, and end the turn, forward, ask, finish or reject.

    A block with a task id other than its turn's, or none known, is recorded as rejected;
    a status block is only shown; a question waits for the user; a final block to the user
    (or to no agent) ends the task; a plan past the task's round limit fails it; any other
    block to another agent is forwarded to it and answers the turn.
    """
    if block.type == "status" and f.own_status:
        return (Record(f.turn_task, accepted=True),)
    task = f.task
    if task is None or (f.turn_task is not None and block.id != f.turn_task):
        why = "unknown task id" if task is None else f"belongs to task {f.turn_task}"
        return (
            Record(f.turn_task, accepted=False, reason=f"id {block.id!r}: {why}"),
            Rejected(f.turn_task, f"block id {block.id}: {why}"),
        )
    recorded = Record(task.id, accepted=True)
    if task.state not in ACTIVE:
        return (recorded, EndAnswered())
    if block.type == "status":
        return (recorded,)  # shown, never forwarded; the turn goes on
    if block.type == "question":
        return (recorded, Ask(block.body))
    target = agent_named(f.agents, block.to)
    if block.type in FINAL_TYPES and (target is None or block.to.upper() in USER_TARGETS):
        return (recorded, Done(block.body))
    if target is None or target == f.agent:
        why = wrong_address(f.agents, f.agent, block, target)
        return (recorded, Rejected(task.id, f"block to {block.to!r}: {why}"))
    kind = block.type if block.type in ("plan", "result") else "message"
    if kind == "plan" and f.rounds >= task.max_rounds and not f.forwarded:
        limit = task.max_rounds
        why = f"round limit {limit} reached: {f.agent} sent plan {limit + 1} for task {task.id}"
        return (recorded, RoundLimit(why))
    state = TaskState.EXECUTING if target == EXECUTER else TaskState.PLANNING
    expect = "result" if kind == "plan" else "plan"
    return (recorded, Forward(target, kind, state, expect))


# --- an agent exited -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Involvement:
    """An active task as an agent's exit concerns it."""

    task_id: str
    state: TaskState
    expects: str | None  # the agent whose block its step waits for


def tasks_of_dead_agent(
    name: str, evidence: str, turn_task: str | None, tasks: t.Iterable[Involvement]
) -> tuple[FailTask, ...]:
    """The tasks an agent's exit fails (resumably): those whose step or turn it had.

    Examples
    --------
    >>> tasks = [Involvement("T1", TaskState.EXECUTING, EXECUTER),
    ...          Involvement("T2", TaskState.PENDING, None),
    ...          Involvement("T3", TaskState.PLANNING, PLANNER)]
    >>> [f.task_id for f in tasks_of_dead_agent(EXECUTER, "$", None, tasks)]
    ['T1']
    """
    return tuple(
        FailTask(
            task.task_id,
            f"agent {name} exited during the {step_name(name)} step of task {task.task_id} "
            f"({evidence}); run `poli up --resume` to restart it and continue",
            TurnEnd.AGENT_DIED,
            resumable=task.state,
        )
        for task in tasks
        if task.state is not TaskState.PENDING
        and (task.expects == name or turn_task == task.task_id)
    )


def server_gone_failures(why: str, tasks: t.Iterable[Involvement]) -> tuple[FailTask, ...]:
    """The tasks a dead tmux server fails (resumably): all that started.

    Examples
    --------
    >>> tasks = [Involvement("T1", TaskState.EXECUTING, None),
    ...          Involvement("T2", TaskState.PENDING, None)]
    >>> [f.task_id for f in server_gone_failures("gone", tasks)]
    ['T1']
    """
    return tuple(
        FailTask(
            task.task_id,
            f"the tmux server is gone ({why}); run `poli up --resume` to restart the agents "
            "and continue",
            TurnEnd.AGENT_DIED,
            resumable=task.state,
        )
        for task in tasks
        if task.state is not TaskState.PENDING  # nothing of it was sent: started as usual
    )


# --- an approval asked or answered ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AwaitApproval:
    """The task waits for the user's answer to ``question`` (and returns to its state after)."""

    question: str


@dataclasses.dataclass(frozen=True)
class Approved:
    """The question is answered: the task goes back to the state it waited in."""


def approval_change(
    task_state: TaskState, asking: str | None, waiting: bool, unknown: bool
) -> AwaitApproval | Approved | None:
    """How a task's state follows its agent's question.

    ``asking``: the question the agent waits on (None: none); ``waiting``: the agent reads
    WAITING_APPROVAL; ``unknown``: its state could not be read (nothing changes then).

    Examples
    --------
    >>> approval_change(TaskState.PLANNING, "asks to run ls", True, False)
    AwaitApproval(question='asks to run ls')
    >>> approval_change(TaskState.WAITING_APPROVAL, None, False, False)
    Approved()
    >>> approval_change(TaskState.WAITING_APPROVAL, None, False, True) is None
    True
    """
    if asking is not None:
        if task_state is TaskState.WAITING_APPROVAL or task_state not in ACTIVE:
            return None
        return AwaitApproval(asking)
    if task_state is TaskState.WAITING_APPROVAL and not waiting and not unknown:
        return Approved()
    return None
