"""The state machines of a message and of a turn: states, allowed transitions, one gate.

A **message** is a prompt on its way to an agent; a **turn** is the prompt outstanding at
an agent (one per agent at a time) from its delivery until it is over. Both tables are
data; :func:`message_step` and :func:`turn_step` are the only gates, and the run store
calls them on every write, so a path that tries anything else fails loudly
(:class:`~politerm.errors.TransitionRejected`) instead of wedging an agent.

Message: PARSED → QUEUED → DELIVERING → DELIVERED → ACKNOWLEDGED, with RETRIED (a delivery
that provably did not submit, to be tried again) and DEAD (dead-lettered: TTL, attempts,
its task ended, a turn already answered).

Turn: DELIVERING (written with the message's DELIVERING, before anything is typed) →
WAITING (delivery confirmed; the deadline starts here) → HOLDING (its answer arrived but the
agent still asks something: the turn stays open until it is idle) → ENDED. A turn ENDS on
every path, each with a :class:`TurnEnd` reason: answered, not delivered, its task ended
(failed, timed out, aborted, done elsewhere), the agent died, the message was dead-lettered,
a resume superseded it, or its task went over its token budget.
"""

from __future__ import annotations

import enum
import typing as t

from politerm.errors import TransitionRejected


class MessageState(enum.StrEnum):
    """Lifecycle of one routed message; see :data:`MESSAGE_TRANSITIONS`."""

    PARSED = "parsed"
    QUEUED = "queued"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    ACKNOWLEDGED = "acknowledged"
    RETRIED = "retried"
    DEAD = "dead"


MESSAGE_TRANSITIONS: t.Final[t.Mapping[MessageState, frozenset[MessageState]]] = {
    MessageState.PARSED: frozenset({MessageState.QUEUED, MessageState.DEAD}),
    MessageState.QUEUED: frozenset({MessageState.DELIVERING, MessageState.DEAD}),
    # DELIVERING -> QUEUED: a resume restarted the agent before the delivery was confirmed:
    # the new process never saw it, so it is safe to send again without counting a retry.
    MessageState.DELIVERING: frozenset(
        {MessageState.DELIVERED, MessageState.RETRIED, MessageState.DEAD, MessageState.QUEUED}
    ),
    MessageState.RETRIED: frozenset({MessageState.DELIVERING, MessageState.DEAD}),
    MessageState.DELIVERED: frozenset({MessageState.ACKNOWLEDGED}),
    MessageState.ACKNOWLEDGED: frozenset(),
    MessageState.DEAD: frozenset(),
}
"""Allowed message state changes; anything else is a bug in the caller."""

SENDABLE_STATES: t.Final = frozenset({MessageState.QUEUED, MessageState.RETRIED})
"""States from which :meth:`RunStore.next_queued` picks a message to deliver."""


class TurnState(enum.StrEnum):
    """Where the prompt outstanding at an agent is; see :data:`TURN_TRANSITIONS`."""

    DELIVERING = "delivering"
    WAITING = "waiting"
    HOLDING = "holding"
    ENDED = "ended"


class TurnEnd(enum.StrEnum):
    """Why a turn ended (every path that ends one names itself)."""

    ANSWERED = "answered"
    NOT_DELIVERED = "not_delivered"
    TASK_ENDED = "task_ended"
    TIMED_OUT = "timed_out"
    AGENT_DIED = "agent_died"
    DEAD_LETTER = "dead_letter"
    RESUMED = "resumed"
    OVER_BUDGET = "over_budget"


TURN_TRANSITIONS: t.Final[t.Mapping[TurnState | None, frozenset[TurnState]]] = {
    None: frozenset({TurnState.DELIVERING}),
    TurnState.DELIVERING: frozenset({TurnState.WAITING, TurnState.ENDED}),
    # WAITING -> WAITING: a nudge or retry of the same turn was delivered.
    TurnState.WAITING: frozenset({TurnState.WAITING, TurnState.HOLDING, TurnState.ENDED}),
    TurnState.HOLDING: frozenset({TurnState.WAITING, TurnState.HOLDING, TurnState.ENDED}),
    TurnState.ENDED: frozenset(),
}
"""Allowed turn state changes (``None``: no turn yet); anything else is a bug."""


def can_transition(old: MessageState, new: MessageState) -> bool:
    """Whether a message may move from ``old`` to ``new``.

    Examples
    --------
    >>> can_transition(MessageState.QUEUED, MessageState.DELIVERING)
    True
    >>> can_transition(MessageState.DELIVERED, MessageState.QUEUED)
    False
    >>> can_transition(MessageState.DEAD, MessageState.DEAD)
    False
    """
    return new in MESSAGE_TRANSITIONS[old]


def message_step(what: str, old: MessageState, new: MessageState) -> MessageState:
    """Check one message transition; return ``new`` or raise.

    Examples
    --------
    >>> message_step("message 1", MessageState.QUEUED, MessageState.DELIVERING).value
    'delivering'
    >>> message_step("message 1", MessageState.DELIVERED, MessageState.QUEUED)
    Traceback (most recent call last):
    ...
    politerm.errors.TransitionRejected: message 1: illegal transition delivered -> queued
    """
    if not can_transition(old, new):
        msg = f"{what}: illegal transition {old.value} -> {new.value}"
        raise TransitionRejected(msg)
    return new


def turn_step(what: str, old: TurnState | None, new: TurnState) -> TurnState:
    """Check one turn transition (``old`` None: no open turn); return ``new`` or raise.

    Examples
    --------
    >>> turn_step("turn of PLANNER", None, TurnState.DELIVERING).value
    'delivering'
    >>> turn_step("turn of PLANNER", TurnState.WAITING, TurnState.DELIVERING)
    Traceback (most recent call last):
    ...
    politerm.errors.TransitionRejected: turn of PLANNER: illegal transition waiting -> delivering
    """
    if new not in TURN_TRANSITIONS[old]:
        before = "none" if old is None else old.value
        msg = f"{what}: illegal transition {before} -> {new.value}"
        raise TransitionRejected(msg)
    return new
