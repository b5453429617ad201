"""Row mappers and value helpers shared by the run store's tables."""

from __future__ import annotations

import enum
import json
import typing as t

from politerm.store._tables import record_of
from politerm.store.models import (
    Agent,
    Block,
    Event,
    Expectation,
    Message,
    MessageState,
    Task,
    TaskState,
    Turn,
)
from politerm.store.turns import TurnState

if t.TYPE_CHECKING:
    import sqlite3


def _json(value: t.Mapping[str, t.Any] | None) -> str:
    return json.dumps(dict(value or {}), sort_keys=True, ensure_ascii=False)


def _load(raw: str) -> dict[str, t.Any]:
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def _text(value: str | enum.Enum) -> str:
    """Store an enum member by its value; ``str()`` of a ``str`` enum is its qualified name.

    Examples
    --------
    >>> _text(TaskState.DONE), _text("ready")
    ('done', 'ready')
    """
    return str(value.value) if isinstance(value, enum.Enum) else value


def _states(
    states: MessageState | t.Collection[MessageState],
) -> frozenset[MessageState]:
    """Normalise one state or a collection of states to a frozenset.

    Examples
    --------
    >>> sorted(s.value for s in _states(MessageState.QUEUED))
    ['queued']
    >>> sorted(s.value for s in _states([MessageState.DEAD, MessageState.QUEUED]))
    ['dead', 'queued']
    """
    if isinstance(states, MessageState):
        return frozenset({states})
    return frozenset(MessageState(s) for s in states)


def _env(raw: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _load(raw).items()}


def _agent(row: sqlite3.Row) -> Agent:
    return record_of(Agent, row, env=_env)


def _task(row: sqlite3.Row) -> Task:
    return record_of(Task, row, state=TaskState)


def _expectation(row: sqlite3.Row) -> Expectation:
    return record_of(Expectation, row, nudged=bool)


def _turn(row: sqlite3.Row) -> Turn:
    return record_of(Turn, row, state=TurnState)


def _message(row: sqlite3.Row) -> Message:
    return record_of(Message, row, header=_load, state=MessageState)


def _block(row: sqlite3.Row) -> Block:
    return record_of(Block, row, header=_load, accepted=bool)


def _event(row: sqlite3.Row) -> Event:
    return record_of(Event, row, data=_load)
