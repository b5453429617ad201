"""What flows through the fleet's queue: a piece of work, a lease on it, its result.

Pure values, no Redis: :class:`Work` (what to do, for which agent; its id is the
idempotency key), :class:`Lease` (one attempt of one node at it, with the epoch that fences
every other attempt), :class:`Result` (what the accepted attempt reported, or a dead letter),
:class:`WorkRecord` (where a piece of work stands, for status views).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import time
import typing as t

from politerm.errors import WorkInvalid
from politerm.fleet.keys import check_name

if t.TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "Lease",
    "Result",
    "Work",
    "WorkKind",
    "WorkRecord",
    "WorkState",
    "check_work_id",
]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


class WorkKind(str, enum.Enum):
    """What a piece of work asks of the agent's node."""

    TURN = "turn"
    """A prompt to type into the agent (a task step, a turn of the loop)."""
    MESSAGE = "message"
    """A message from another agent, delivered when the agent is idle."""
    BRIDGE = "bridge"
    """A bridge task handed to the agent."""
    ANSWER = "answer"
    """An approval or an answer given on another node, for the agent's open question."""


class WorkState(str, enum.Enum):
    """Where a piece of work stands. Only the queue's scripts change it (see queue.py)."""

    QUEUED = "queued"
    """Submitted (or given back), no attempt is live."""
    PAUSED = "paused"
    """A budget cap stopped its attempt before anything was typed (the attempt undone): it
    waits, queued, until the cap allows a turn again."""
    LEASED = "leased"
    """One attempt holds a lease (its node may type while the lease lasts)."""
    DONE = "done"
    """An attempt with the current epoch reported its outcome; it was accepted."""
    DEAD = "dead"
    """It used up its attempts (a dead letter)."""

    @property
    def ended(self) -> bool:
        """DONE or DEAD: nothing will happen to it any more."""
        return self in (WorkState.DONE, WorkState.DEAD)


def check_work_id(work_id: str) -> str:
    """``work_id`` if it can be an idempotency key, else :class:`WorkInvalid`.

    Examples
    --------
    >>> check_work_id("task-7:turn:2")
    'task-7:turn:2'
    >>> check_work_id("has space")
    Traceback (most recent call last):
    ...
    politerm.errors.WorkInvalid: work id 'has space': expected letters, digits, '_', '.', ':', '-' (at most 200)
    """  # noqa: E501
    if not _ID_RE.match(work_id):
        msg = f"work id {work_id!r}: expected letters, digits, '_', '.', ':', '-' (at most 200)"
        raise WorkInvalid(msg)
    return work_id


def to_json(value: t.Any, what: str) -> str:
    """``value`` as compact JSON; :class:`WorkInvalid` naming ``what`` when it is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        msg = f"{what} is not JSON: {exc}"
        raise WorkInvalid(msg) from None


@dataclasses.dataclass(frozen=True)
class Work:
    """One piece of work for one agent.

    Parameters
    ----------
    id
        The idempotency key: submitting the same id again changes nothing.
    agent
        The agent (and so the work stream) it is for; only a node hosting it claims it.
    kind
        What it asks (:class:`WorkKind`).
    payload
        A JSON object: the prompt, the task id, the nonce… Every string in it is redacted
        before it reaches Redis.
    attempt
        0 when submitted; the attempt's number (1, 2, …) in a :class:`Lease`.
    """

    id: str
    agent: str
    kind: WorkKind = WorkKind.TURN
    payload: Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    attempt: int = 0

    def __post_init__(self) -> None:
        check_work_id(self.id)
        check_name("agent", self.agent)
        if not isinstance(self.kind, WorkKind):
            try:
                object.__setattr__(self, "kind", WorkKind(self.kind))
            except ValueError:
                kinds = ", ".join(k.value for k in WorkKind)
                msg = f"work {self.id}: kind {self.kind!r} is not one of {kinds}"
                raise WorkInvalid(msg) from None
        if not isinstance(self.payload, dict):
            msg = f"work {self.id}: the payload must be a JSON object, not {type(self.payload)}"
            raise WorkInvalid(msg)


@dataclasses.dataclass(frozen=True)
class Lease:
    """One node's attempt at one piece of work, valid while its epoch is the work's newest.

    ``expires_at`` is Redis's clock (seconds since 1970); ``deadline`` is this process's
    ``time.monotonic()`` at which the lease surely ended, computed from the moment the
    request was *sent* (so it is never later than Redis's expiry, whatever the network
    took): the node's own view when Redis cannot be asked.
    """

    work: Work
    node: str
    epoch: int
    expires_at: float
    entry: str
    deadline: float

    def remaining(self, now: float | None = None) -> float:
        """Seconds left by this process's clock (never more than Redis's own count)."""
        return self.deadline - (time.monotonic() if now is None else now)

    def __str__(self) -> str:
        return (
            f"work {self.work.id} ({self.work.agent}, attempt {self.work.attempt}, "
            f"epoch {self.epoch}, node {self.node})"
        )


@dataclasses.dataclass(frozen=True)
class Result:
    """How a piece of work ended: the accepted outcome, or a dead letter."""

    work_id: str
    agent: str
    state: WorkState
    outcome: Mapping[str, t.Any]
    epoch: int
    node: str
    attempt: int


@dataclasses.dataclass(frozen=True)
class WorkRecord:
    """Where a piece of work stands (its record in Redis, the payload left out)."""

    id: str
    agent: str
    kind: WorkKind
    state: WorkState
    attempt: int
    epoch: int
    node: str
    expires_at: float
    submitted_at: float
    late: int
    """How many late results (of fenced attempts) were rejected for it."""
    error: str
    """Why its last attempt was given back or why it died ('' if none)."""
    paused: str = ""
    """Why a budget cap paused it ('' unless it is :attr:`WorkState.PAUSED`)."""
