"""Row mappers and value helpers shared by the run store's tables."""

from __future__ import annotations

import enum
import json
import typing as t

from politerm.store._tables import row_mapper
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


_agent = row_mapper(Agent, env=_env)
_task = row_mapper(Task, state=TaskState)
_expectation = row_mapper(Expectation, nudged=bool)
_turn = row_mapper(Turn, state=TurnState)
_message = row_mapper(Message, header=_load, state=MessageState)
_block = row_mapper(Block, header=_load, accepted=bool)
_event = row_mapper(Event, data=_load)
