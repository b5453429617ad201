"""Row mappers and value helpers shared by the run store's tables."""

from __future__ import annotations

import enum
import json
import typing as t

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


def _agent(row: sqlite3.Row) -> Agent:
    return Agent(
        name=row["name"],
        session=row["session"],
        pane_id=row["pane_id"],
        command=row["command"],
        cwd=row["cwd"],
        profile=row["profile"],
        resume_command=row["resume_command"],
        env={str(k): str(v) for k, v in _load(row["env"]).items()},
        state=row["state"],
        created=row["created"],
        updated=row["updated"],
        socket=row["socket"],
    )


def _task(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"],
        request=row["request"],
        state=TaskState(row["state"]),
        round=row["round"],
        max_rounds=row["max_rounds"],
        report=row["report"],
        error=row["error"],
        question=row["question"],
        created=row["created"],
        updated=row["updated"],
    )


def _expectation(row: sqlite3.Row) -> Expectation:
    return Expectation(
        task_id=row["task_id"],
        sender=row["sender"],
        type=row["type"],
        deadline=row["deadline"],
        nudged=bool(row["nudged"]),
        created=row["created"],
    )


def _turn(row: sqlite3.Row) -> Turn:
    return Turn(
        agent=row["agent"],
        nonce=row["nonce"],
        task_id=row["task_id"],
        message_id=row["message_id"],
        start_line=row["start_line"],
        started=row["started"],
        state=TurnState(row["state"]),
    )


def _message(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        task_id=row["task_id"],
        sender=row["sender"],
        recipient=row["recipient"],
        type=row["type"],
        msg_id=row["msg_id"],
        nonce=row["nonce"],
        turn_nonce=row["turn_nonce"],
        body=row["body"],
        header=_load(row["header"]),
        text=row["text"],
        state=MessageState(row["state"]),
        attempts=row["attempts"],
        last_error=row["last_error"],
        evidence=row["evidence"],
        created=row["created"],
        updated=row["updated"],
        deadline=row["deadline"],
        dedupe_key=row["dedupe_key"],
        turn_id=row["turn_id"],
    )


def _block(row: sqlite3.Row) -> Block:
    return Block(
        id=row["id"],
        agent=row["agent"],
        task_id=row["task_id"],
        type=row["type"],
        msg_id=row["msg_id"],
        nonce=row["nonce"],
        dedupe_key=row["dedupe_key"],
        header=_load(row["header"]),
        body=row["body"],
        accepted=bool(row["accepted"]),
        reason=row["reason"],
        seen=row["seen"],
    )


def _event(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        ts=row["ts"],
        kind=row["kind"],
        task_id=row["task_id"],
        agent=row["agent"],
        detail=row["detail"],
        data=_load(row["data"]),
    )
