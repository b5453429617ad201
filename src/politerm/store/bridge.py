"""The task bridge's step journal in the run store.

Each task the bridge hands to an executor runs as numbered steps (its file edits, each
command, an agent turn). A step's row is written ``started`` with its evidence (file hashes
before and after, the runner's status file, the agent and nonce) *before* the step acts,
and ``done``/``failed`` with its result after. A bridge that restarts after ``kill -9``
therefore never repeats a finished step and settles an unfinished one from its evidence.
Table from schema version 5 (see :mod:`politerm.store.db`). Text passes a
:class:`~politerm.redact.Redactor` before it is written.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing as t

from politerm.store._tables import StoreTables, insert, row_mapper

if t.TYPE_CHECKING:
    from politerm.redact import Redactor
    from politerm.store.runstore import RunStore


class StepState(str, enum.Enum):
    """Where one step of a bridge task stands."""

    STARTED = "started"
    DONE = "done"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class BridgeStep:
    """One journalled step."""

    queue: str
    task_id: str
    step: int
    kind: str
    state: StepState
    evidence: dict[str, t.Any]
    result: dict[str, t.Any]
    started: float
    finished: float | None
    turn_id: int | None = None
    """An agent step's row in the journal of turns (:mod:`politerm.store.journal`)."""


_KEY: t.Final = " WHERE queue = ? AND task_id = ? AND step = ?"


_step = row_mapper(BridgeStep, state=StepState, evidence=json.loads, result=json.loads)


class BridgeJournal(StoreTables):
    """The ``bridge_steps`` table of a :class:`~politerm.store.RunStore`.

    Parameters
    ----------
    store
        An open run store at schema version 5 or later.
    queue
        The queue this journal is about (its absolute path); steps of other queues in the
        same store are kept apart.
    redactor
        Applied to every value before it is written.
    """

    def __init__(self, store: RunStore, queue: str, redactor: Redactor | None = None) -> None:
        super().__init__(store, redactor)
        self.queue = queue

    def _json(self, value: dict[str, t.Any]) -> str:
        return json.dumps(self.redactor.redact_json(value), sort_keys=True)

    def start(self, task_id: str, step: int, kind: str, evidence: dict[str, t.Any]) -> BridgeStep:
        """Record that a step is about to act; an existing row is returned unchanged."""
        values = {"queue": self.queue, "task_id": task_id, "step": step, "kind": kind}
        values |= {"state": "started", "evidence": self._json(evidence), "started": self._now()}
        with self.store._writing() as c:
            # Read back through the same (redacting) connection: the key is stored redacted.
            row = (
                insert(c, "bridge_steps", values, "ON CONFLICT DO NOTHING")
                or c.execute(
                    f"SELECT * FROM bridge_steps{_KEY}", (self.queue, task_id, step)
                ).fetchone()
            )
        self._audit("bridge.step", queue=self.queue, task_id=task_id, step=step, step_kind=kind)
        return _step(row)

    def finish(self, task_id: str, step: int, state: StepState, result: dict[str, t.Any]) -> None:
        """Record how a step ended (``done`` or ``failed``) and what it produced."""
        with self.store._writing() as c:
            c.execute(
                "UPDATE bridge_steps SET state = ?, result = ?, finished = ?"
                " WHERE queue = ? AND task_id = ? AND step = ?",
                (state.value, self._json(result), self._now(), self.queue, task_id, step),
            )
        self._audit("bridge.step." + state.value, queue=self.queue, task_id=task_id, step=step)

    def get(self, task_id: str, step: int) -> BridgeStep | None:
        """The journalled step, if it was ever started."""
        sql = f"SELECT * FROM bridge_steps{_KEY}"
        return self.store._one(_step, sql, self.queue, task_id, step)

    def steps(self, task_id: str) -> list[BridgeStep]:
        """Every step of a task, in order."""
        sql = "SELECT * FROM bridge_steps WHERE queue = ? AND task_id = ? ORDER BY step"
        return self.store._all(_step, sql, self.queue, task_id)

    def forget(self, task_id: str) -> None:
        """Drop a finalized task's steps (its archive keeps the story)."""
        with self.store._writing() as c:
            c.execute(
                "DELETE FROM bridge_steps WHERE queue = ? AND task_id = ?", (self.queue, task_id)
            )

    def event(self, kind: str, task_id: str, detail: str) -> None:
        """A line on the run store's timeline (``poli status`` shows it)."""
        self.store.add_event(kind, task_id=f"bridge:{task_id}", detail=self.redactor.redact(detail))
