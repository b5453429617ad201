"""One step of an agent's routing loop, decided: pure functions of what a look saw → actions.

:mod:`politerm.engine.decide` decides what an event does to a task (a delivery's outcome,
a step's clock, a block); this module decides what the agent's own loop does next with
the look it just took: settle what a previous router left, clear a dead-lettered prompt
from the box, drop a turn whose task ended, take a silent turn as answered, type the next
message (how: its nonce, whether its text is typed again or only submitted), hand a
forwarded prompt straight over, and how long to sleep until the next look. Like
:mod:`~politerm.engine.decide`, nothing here reads the store, a screen or a clock: the
router gathers the facts and :class:`~politerm.engine.execute.Executor` carries the
actions out (``tests/test_agentstep.py`` walks the tables).
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.agents.state import AgentState
from politerm.engine.decide import ACTIVE, FOLLOW_UPS, PLANNER
from politerm.store.models import MessageState, TaskState, TurnEnd

# An agent idle this long after a prompt, with no block, has answered without one.
IDLE_GRACE = 1.5
# Longest sleep of an agent loop with no event: idle agent / agent working on a turn.
# An idle agent's loop wakes on its output, pane death, copy mode, store work for it, or
# when silence alone would change its state (StateTracker.next_change); the idle bound only
# covers a notification lost in a tmux reconnect, and keeps every wait bounded.
IDLE_BACKSTOP = 300.0
TURN_BACKSTOP = 2.0
# States in which a turn's answer must wait: the agent still works, or asks something.
NOT_IDLE = frozenset({AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG})


# --- after a look --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AgentDied:
    """The agent exited: it is dead, and the tasks it had fail (resumably)."""


@dataclasses.dataclass(frozen=True)
class Settle:
    """Settle the deliveries a previous router left mid-way before anything else."""


@dataclasses.dataclass(frozen=True)
class ClearBox:
    """Clear the dead-lettered prompt left in the agent's input box."""


@dataclasses.dataclass(frozen=True)
class EndStale:
    """The open turn's task ended elsewhere (failed, aborted, answered): the agent is free."""

    reason: TurnEnd = TurnEnd.TASK_ENDED


LookAction = AgentDied | Settle | ClearBox | EndStale


@dataclasses.dataclass(frozen=True)
class Look:
    """What an agent's loop knows right after a look at its agent.

    Attributes
    ----------
    state
        The agent's state as the driver read it.
    settled
        The loop already settled what a previous router left for this agent.
    in_flight
        A message to this agent is DELIVERING (left by a stopped router, before this look).
    clear_pending
        A dead-lettered prompt is still in its input box.
    turn_task, task_state
        The open turn's task, and that task's state (None: gone or no turn task).
    """

    state: AgentState
    settled: bool
    in_flight: bool
    clear_pending: bool
    turn_task: str | None
    task_state: TaskState | None


def after_look(f: Look) -> LookAction | None:
    """What comes first after a look: the agent's death, settling, a box to clear, a stale turn.

    None: the loop goes on with the open turn (or with none).

    Examples
    --------
    >>> after_look(Look(AgentState.READY, True, False, False, "T1", TaskState.DONE))
    EndStale(reason=<TurnEnd.TASK_ENDED: 'task_ended'>)
    >>> after_look(Look(AgentState.READY, True, False, False, "T1", TaskState.PLANNING)) is None
    True
    """
    if f.state is AgentState.EXITED:
        return AgentDied()
    if not f.settled and f.in_flight:
        return Settle()
    if f.clear_pending and f.state is AgentState.READY:
        return ClearBox()
    if f.turn_task is not None and f.task_state not in ACTIVE:
        return EndStale()
    return None


# --- a turn answered without a block -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Silence:
    """An open WAITING turn whose agent printed no block, as the loop sees it.

    Attributes
    ----------
    state, settling
        The agent's state, and whether a block on screen waits for its second look.
    prompt_state
        The turn's prompt's state (None: the turn has no message).
    idle_for, busy_seen, turn_age
        Seconds READY, whether it was seen busy since the prompt, seconds since the turn.
    agent, prompt_kind, task_state
        Whose turn, the prompt's type, its task's state (None: no task).
    """

    state: AgentState
    settling: bool
    prompt_state: MessageState | None
    idle_for: float
    busy_seen: bool
    turn_age: float
    agent: str
    prompt_kind: str
    task_state: TaskState | None


def answered_in_prose(f: Silence) -> bool:
    """Whether the turn was answered without a block: the planner's report on a result.

    An agent quiet for :data:`IDLE_GRACE` after its prompt (seen busy, or the turn twice
    that old) has answered; only a planner answering a result in prose ends its task,
    with the screen as the report.

    Examples
    --------
    >>> f = Silence(AgentState.READY, False, MessageState.DELIVERED, 2.0, True, 5.0,
    ...             PLANNER, "result", TaskState.PLANNING)
    >>> answered_in_prose(f), answered_in_prose(dataclasses.replace(f, prompt_kind="task"))
    (True, False)
    """
    if f.state is not AgentState.READY or f.settling:
        return False
    if f.prompt_state is not MessageState.DELIVERED:
        return False
    quiet = f.idle_for >= IDLE_GRACE and (f.busy_seen or f.turn_age >= IDLE_GRACE * 2)
    return quiet and f.task_state in ACTIVE and f.agent == PLANNER and f.prompt_kind == "result"


# --- what to type next -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SendNext:
    """Type the next queued message: only the open turn's own follow-ups, or any."""

    follow_ups_only: bool


def next_send(state: AgentState, retry_in: float | None, turn_open: bool) -> SendNext | None:
    """Whether the loop types something now: one prompt at a time, to a READY agent.

    ``retry_in``: seconds until a delivery that did not get through may be tried again
    (None or ≤ 0: due).

    Examples
    --------
    >>> next_send(AgentState.READY, None, True), next_send(AgentState.BUSY, None, False)
    (SendNext(follow_ups_only=True), None)
    >>> next_send(AgentState.READY, 0.5, False) is None
    True
    """
    if state is not AgentState.READY:
        return None
    if retry_in is not None and retry_in > 0:
        return None  # a delivery that did not get through waits for its backoff
    return SendNext(follow_ups_only=turn_open)


@dataclasses.dataclass(frozen=True)
class Outgoing:
    """A queued message about to be typed to a READY agent (the event), as the router knows it.

    Attributes
    ----------
    kind
        The message's type.
    task_state
        Its task's state (None: no task, or gone).
    turn_nonce
        The agent's open turn (None: none).
    nonce, has_text, stranded_before
        The nonce and text its last attempt was typed with, and whether that attempt
        ended STRANDED (the agent ignored the submit key).
    box_text
        The agent's input box holds text.
    fresh
        A new nonce, should the message need one (the decision draws none itself).
    """

    kind: str
    task_state: TaskState | None
    turn_nonce: str | None
    nonce: str | None
    has_text: bool
    stranded_before: bool
    box_text: bool
    fresh: str


@dataclasses.dataclass(frozen=True)
class Drop:
    """Do not type the message: it goes DEAD with ``error``."""

    error: str


@dataclasses.dataclass(frozen=True)
class Begin:
    """Mark the message DELIVERING under ``nonce`` (its turn opens unless ``follow_up``).

    ``keep_text``: type the text it was typed with before (same nonce); ``stranded``: that
    text is still in the box, only submit it.
    """

    nonce: str
    keep_text: bool
    stranded: bool
    follow_up: bool


def begin_delivery(f: Outgoing) -> Begin | Drop:
    """How a queued message is typed: never for an ended task, in its turn, nonce kept or new.

    A follow-up (nudge, retry) of an open turn is part of that turn (its nonce); a STRANDED
    attempt that left its text in the box is submitted, not pasted again.

    Examples
    --------
    >>> f = Outgoing("plan", TaskState.EXECUTING, None, "n1", True, True, True, "n2")
    >>> begin_delivery(f)
    Begin(nonce='n1', keep_text=True, stranded=True, follow_up=False)
    >>> begin_delivery(dataclasses.replace(f, box_text=False))
    Begin(nonce='n2', keep_text=False, stranded=False, follow_up=False)
    >>> begin_delivery(dataclasses.replace(f, task_state=TaskState.FAILED))
    Drop(error='task failed')
    """
    if f.task_state is not None and f.task_state not in ACTIVE:
        return Drop(f"task {f.task_state.value}")
    follow_up = f.kind in FOLLOW_UPS and f.turn_nonce is not None
    stranded = bool(f.stranded_before and f.has_text and f.nonce and f.box_text)
    if stranded and f.nonce:
        nonce = f.nonce
    elif follow_up and f.turn_nonce is not None:
        nonce = f.turn_nonce
    else:
        nonce = f.fresh
    keep = f.has_text and f.nonce == nonce
    return Begin(nonce, keep_text=keep, stranded=stranded, follow_up=follow_up)


def handoff_stands(turn_nonce: str | None, nonce: str, task_state: TaskState | None) -> Drop | None:
    """Whether a delivery a block's commit began is still to be typed (None: type it).

    Between that commit and the recipient's loop its task may have ended (an abort, a
    failure) or its turn gone: then nothing is typed and the message goes DEAD.

    Examples
    --------
    >>> handoff_stands("n1", "n1", TaskState.EXECUTING) is None
    True
    >>> handoff_stands("n1", "n1", TaskState.ABORTED)
    Drop(error='its task ended before the prompt was typed')
    """
    if turn_nonce == nonce and (task_state is None or task_state in ACTIVE):
        return None
    return Drop("its task ended before the prompt was typed")


@dataclasses.dataclass(frozen=True)
class Taken:
    """The left-over prompt reached the agent (its screen or records say so): record it."""


@dataclasses.dataclass(frozen=True)
class Abandon:
    """Its task ended before the prompt was typed: DEAD (``error``), its row abandoned.

    ``clear_box``: its text waits in the agent's input box.
    """

    error: str
    clear_box: bool


@dataclasses.dataclass(frozen=True)
class Retype:
    """Type the left-over prompt again (same text, nonce); ``pasted``: only submit it."""

    pasted: bool


def left_over_fate(
    resumed: t.Literal["pasted", "delivered"] | None, task_state: TaskState | None
) -> Taken | Abandon | Retype:
    """What settles a prompt a stopped router left handed (its journal row open).

    ``resumed``: what the driver's recovery found (``delivered``: taken; ``pasted``: its
    text in the box; None: nothing); ``task_state``: its task's (None: no task).

    Examples
    --------
    >>> left_over_fate("pasted", TaskState.EXECUTING), left_over_fate(None, None)
    (Retype(pasted=True), Retype(pasted=False))
    >>> left_over_fate("pasted", TaskState.ABORTED)
    Abandon(error='task aborted', clear_box=True)
    """
    if resumed == "delivered":
        return Taken()
    if task_state is not None and task_state not in ACTIVE:
        return Abandon(f"task {task_state.value}", clear_box=resumed == "pasted")
    return Retype(pasted=resumed == "pasted")


@dataclasses.dataclass(frozen=True)
class Recipient:
    """The agent a block is forwarded to, as its loop last left it."""

    dead: bool
    state: AgentState
    settled: bool
    handed: bool
    turn_open: bool
    clear_pending: bool
    stopping: bool


def takes_handoff(r: Recipient) -> bool:
    """Whether a forwarded prompt may begin in the block's own commit (typed by its loop).

    Only for a recipient idle as last looked at, with no turn of its own, nothing left to
    settle or clear, no delivery handed to it already, and a router not stopping (no loop
    would be left to type it).

    Examples
    --------
    >>> r = Recipient(False, AgentState.READY, True, False, False, False, False)
    >>> takes_handoff(r), takes_handoff(dataclasses.replace(r, turn_open=True))
    (True, False)
    """
    return (
        r.state is AgentState.READY
        and r.settled
        and not (r.dead or r.handed or r.turn_open or r.clear_pending or r.stopping)
    )


# --- how long the loop sleeps ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sleep:
    """What bounds an agent loop's sleep when no event wakes it (times are monotonic).

    Attributes
    ----------
    now, idle_bound
        The time, and the loop's backstop while idle (see ``router.idle_backstop``).
    limit_due
        Seconds until an open usage limit's reset is acted on (None: no limit).
    turn_open, settling, block_settle, state
        A turn is open; a block waits for its second look, after ``block_settle`` s; the
        agent's state.
    retry_at
        When a delivery that did not get through is tried again (None: none).
    transcript_until
        Until when a finished turn's transcript copy is looked for (None: no transcript).
    next_change
        When silence alone changes the agent's state (None: never).
    """

    now: float
    idle_bound: float
    limit_due: float | None
    turn_open: bool
    settling: bool
    block_settle: float
    state: AgentState
    retry_at: float | None
    transcript_until: float | None
    next_change: float | None


def sleep_bound(s: Sleep) -> float:
    """The longest an agent's loop sleeps with no event (output, pane death, store, wake).

    Examples
    --------
    >>> s = Sleep(100.0, 300.0, None, False, False, 0.5, AgentState.READY, None, None, None)
    >>> sleep_bound(s), sleep_bound(dataclasses.replace(s, retry_at=103.0))
    (300.0, 3.0)
    """
    if s.limit_due is not None:
        return max(0.5, min(s.limit_due, IDLE_BACKSTOP))  # the resume at the limit's reset
    if s.turn_open:
        if s.settling:
            return s.block_settle  # the second look that lets a block count
        if s.state is AgentState.READY:
            return 0.5  # an answer without a block shows as silence
        return TURN_BACKSTOP
    bound = s.idle_bound
    if s.retry_at is not None:
        bound = max(0.05, s.retry_at - s.now)  # no output announces a retry's time
    if s.transcript_until is not None and s.now < s.transcript_until:
        bound = TURN_BACKSTOP
    if s.next_change is not None:
        bound = min(bound, max(0.05, s.next_change - s.now))
    return bound
