"""Rows of the run store: state enums and frozen dataclasses.

These are plain values: reading them never touches the database, and the store hands out new
ones after every write rather than mutating old ones.
"""

from __future__ import annotations

import dataclasses
import enum
import typing as t

from politerm.store.turns import (
    MESSAGE_TRANSITIONS,
    SENDABLE_STATES,
    MessageState,
    TurnEnd,
    TurnState,
    can_transition,
)


class TaskState(enum.StrEnum):
    """Lifecycle of a task routed between Planner and Executer."""

    PENDING = "pending"
    PLANNING = "planning"
    EXECUTING = "executing"
    WAITING_USER = "waiting_user"
    WAITING_APPROVAL = "waiting_approval"
    DONE = "done"
    FAILED = "failed"
    ABORTED = "aborted"

    @property
    def is_terminal(self) -> bool:
        """Whether the task has finished for good.

        Examples
        --------
        >>> TaskState.DONE.is_terminal, TaskState.WAITING_USER.is_terminal
        (True, False)
        """
        return self in TERMINAL_TASK_STATES


TERMINAL_TASK_STATES: t.Final = frozenset({TaskState.DONE, TaskState.FAILED, TaskState.ABORTED})


@dataclasses.dataclass(frozen=True, slots=True)
class Agent:
    """An agent TUI running in a tmux pane.

    ``state`` is a free string so the agents layer owns its own enum; ``str`` enums pass
    through unchanged.
    """

    name: str
    session: str
    pane_id: str
    command: str
    cwd: str
    profile: str
    resume_command: str | None
    env: dict[str, str] = dataclasses.field(hash=False)
    state: str
    created: float
    updated: float
    #: The tmux server (socket name) of its pane; empty: the configured one.
    socket: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    """One user request and how far the Planner/Executer loop has got with it."""

    id: str
    request: str
    state: TaskState
    round: int
    max_rounds: int
    report: str | None
    error: str | None
    question: str | None
    created: float
    updated: float


@dataclasses.dataclass(frozen=True, slots=True)
class Expectation:
    """What the router is waiting for on a task: a block of ``type`` from ``sender``."""

    task_id: str
    sender: str
    type: str
    deadline: float
    nudged: bool
    created: float


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """The prompt currently outstanding at an agent.

    ``start_line`` is where the agent's answer starts in the pane history, so that after a
    restart the router re-reads only output produced for this prompt.
    """

    agent: str
    nonce: str
    task_id: str | None
    message_id: int | None
    start_line: int
    started: float
    state: TurnState = TurnState.WAITING


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """A routed message and its delivery state."""

    id: int
    task_id: str | None
    sender: str
    recipient: str
    type: str
    msg_id: str
    nonce: str | None
    turn_nonce: str | None
    body: str
    header: dict[str, t.Any] = dataclasses.field(hash=False)
    text: str | None
    state: MessageState
    attempts: int
    last_error: str | None
    evidence: str | None
    created: float
    updated: float
    deadline: float | None
    dedupe_key: str
    turn_id: int | None = None
    """Its last delivery's row in the journal of turns (:mod:`politerm.store.journal`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Block:
    """A tagged block seen in an agent's output, accepted or not."""

    id: int
    agent: str
    task_id: str | None
    type: str
    msg_id: str | None
    nonce: str | None
    dedupe_key: str
    header: dict[str, t.Any] = dataclasses.field(hash=False)
    body: str
    accepted: bool
    reason: str | None
    seen: float


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One entry of the human-readable timeline shown by ``poli status``."""

    id: int
    ts: float
    kind: str
    task_id: str | None
    agent: str | None
    detail: str
    data: dict[str, t.Any] = dataclasses.field(hash=False)


__all__ = [
    "MESSAGE_TRANSITIONS",
    "SENDABLE_STATES",
    "TERMINAL_TASK_STATES",
    "Agent",
    "Block",
    "Event",
    "Expectation",
    "Message",
    "MessageState",
    "Task",
    "TaskState",
    "Turn",
    "TurnEnd",
    "TurnState",
    "can_transition",
]
