"""The journal of turns: one row per prompt handed to an agent, whatever the workflow.

The driver (:class:`~politerm.driver.agent.AgentDriver`) writes a row before anything is
typed and moves it through its states in its one delivery and turn path; each workflow's
own record of the prompt (a loop message, a mail, a bridge step, a pipeline step, a
manager step, an epic session record) points to the row by its id (``turn_id``), and the
row names that record back (:class:`Serves`). After a crash the open rows (not ended) are
what was in flight.

A row's states and the changes allowed between them (:data:`JOURNAL_TRANSITIONS`,
:func:`journal_step` the one gate)::

    HANDED ──confirmed──▶ DELIVERED ──the turn is over──▶ ENDED (outcome)
      │ │                     │
      │ └─not submitted──▶ FAILED (outcome: stranded, blocked, agent_exited)
      └───────────────────────┴──never settled, superseded──▶ ABANDONED (outcome)

- HANDED: written before the paste; a crash here leaves the prompt typed, pasted or not
  typed at all, which only the agent's screen and records can tell
  (:func:`politerm.driver.leftover.resume`).
- DELIVERED: the driver confirmed it (``proof``: what it saw, and which sources said so).
- ENDED: the turn is over, ``outcome`` says how (answered, timeout, exited, …).
- FAILED: the delivery did not get through; the next attempt is a row of its own.
- ABANDONED: given up before it ended: superseded by a new attempt, its agent restarted by
  a resume, its task ended before it was typed, its caller gave the turn up, a fleet
  node's lease fenced, or no driver is left to settle it.

A resumed attempt continues its open row (:meth:`JournalRows.journal_hand` returns it)
instead of writing a second one, so there is one row per attempt. No prompt text is kept
but its SHA-256, its length and its first characters, redacted like every store write.
Table from schema version 8 (see :mod:`politerm.store.db`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import typing as t

from politerm.errors import TransitionRejected
from politerm.store._core import StoreCore
from politerm.store._tables import insert, row_mapper, where

#: Characters of a prompt's start kept in its row (redacted), to tell rows apart.
HEAD_CHARS: t.Final = 120


class JournalState(enum.StrEnum):
    """Where one prompt handed to an agent stands; see :data:`JOURNAL_TRANSITIONS`."""

    HANDED = "handed"
    DELIVERED = "delivered"
    ENDED = "ended"
    FAILED = "failed"
    ABANDONED = "abandoned"


JOURNAL_TRANSITIONS: t.Final[t.Mapping[JournalState, frozenset[JournalState]]] = {
    JournalState.HANDED: frozenset(
        {JournalState.DELIVERED, JournalState.FAILED, JournalState.ABANDONED}
    ),
    JournalState.DELIVERED: frozenset({JournalState.ENDED, JournalState.ABANDONED}),
    JournalState.ENDED: frozenset(),
    JournalState.FAILED: frozenset(),
    JournalState.ABANDONED: frozenset(),
}
"""Allowed changes of a journal row; anything else is a bug in the caller."""

#: The journal rows of an agent's loop messages still being delivered.
_TYPING: t.Final = "SELECT turn_id FROM messages WHERE recipient = ? AND state = 'delivering'"

OPEN_STATES: t.Final = frozenset({JournalState.HANDED, JournalState.DELIVERED})
"""A row in one of these is in flight: a crash leaves it for the recovery."""


def journal_step(what: str, old: JournalState, new: JournalState) -> None:
    """Allow ``old`` → ``new`` for ``what`` (a row), or raise.

    Examples
    --------
    >>> journal_step("turn 1", JournalState.HANDED, JournalState.DELIVERED)
    >>> journal_step("turn 1", JournalState.ENDED, JournalState.DELIVERED)
    Traceback (most recent call last):
    ...
    politerm.errors.TransitionRejected: turn 1: ended -> delivered is not allowed
    """
    if new not in JOURNAL_TRANSITIONS[old]:
        msg = f"{what}: {old.value} -> {new.value} is not allowed"
        raise TransitionRejected(msg)


class Workflow(enum.StrEnum):
    """Which workflow handed a prompt to an agent."""

    LOOP = "loop"
    PIPELINE = "pipeline"
    EPIC = "epic"
    MANAGER = "manager"
    BRIDGE = "bridge"
    MESSAGING = "messaging"
    FLEET = "fleet"


#: The workflow records kept in a table of this store, by the columns of their key; the
#: journal row's id is written to their ``turn_id`` in the transaction that hands the prompt.
LINKED_TABLES: t.Final[t.Mapping[str, tuple[str, ...]]] = {
    "messages": ("id",),
    "mail": ("id",),
    "bridge_steps": ("queue", "task_id", "step"),
    "manager_turns": ("id",),
    "session_records": ("id",),
}


@dataclasses.dataclass(frozen=True)
class Serves:
    """The workflow record a prompt serves.

    Parameters
    ----------
    workflow
        Who hands the prompt.
    record
        The record's kind: a table of :data:`LINKED_TABLES` (its ``turn_id`` is set in the
        same transaction as the row), or a record kept elsewhere (``pipeline-step``: in the
        run's state; ``manager-step``, ``brain-call``), which keeps the id it is told.
    key
        The record's key (the table's key columns, in order).
    """

    workflow: Workflow
    record: str
    key: tuple[str | int, ...]

    @property
    def key_text(self) -> str:
        """The key as one string, as the journal keeps it.

        Examples
        --------
        >>> Serves(Workflow.BRIDGE, "bridge_steps", ("/q.json", "t1", 0)).key_text
        '["/q.json", "t1", 0]'
        """
        return json.dumps(list(self.key), ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class JournalRow:
    """One prompt handed to an agent."""

    id: int
    agent: str
    workflow: str
    record: str
    record_key: str
    attempt: int
    nonce: str | None
    state: JournalState
    digest: str
    length: int
    head: str
    proof: dict[str, t.Any]
    conversation: str | None
    start_line: int | None
    started: float
    delivered: float | None
    ended: float | None
    outcome: str | None
    work: str | None = None
    """The fleet's work this prompt serves, when a node typed it under a lease."""
    node: str | None = None
    """The node holding that lease."""
    epoch: int | None = None
    """The lease's fencing epoch: a later claim of the work has a higher one."""
    lease_until: float | None = None
    """When the lease expired, as last renewed before the paste (epoch seconds)."""
    verdict: str | None = None
    """The queue's word on the result: ``accepted``, or ``rejected: …`` (fenced)."""

    @property
    def open(self) -> bool:
        """Not ended: a crash would leave it for the recovery."""
        return self.state in OPEN_STATES

    @property
    def serves(self) -> Serves:
        """The record the prompt serves."""
        return Serves(Workflow(self.workflow), self.record, tuple(json.loads(self.record_key)))

    def to_json(self) -> dict[str, t.Any]:
        """JSON-ready (``poli status --json``)."""
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        data["record_key"] = json.loads(self.record_key)
        return data


def prompt_digest(text: str) -> str:
    """The SHA-256 of a prompt as typed (the hook receipts digest it the same way).

    Examples
    --------
    >>> prompt_digest("hi")[:12]
    '8f434346648f'
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_row = row_mapper(JournalRow, state=JournalState, proof=json.loads)


class JournalRows(StoreCore):
    """The run store's journal of turns (table ``turn_journal``); see the module doc."""

    def journal_hand(
        self,
        agent: str,
        serves: Serves,
        *,
        text: str,
        nonce: str | None = None,
        start_line: int | None = None,
        conversation: str | None = None,
    ) -> JournalRow:
        """Write that ``agent`` is handed ``text`` for ``serves``, before anything is typed.

        The row is HANDED and counts the record's attempts; a record kept in a table of
        :data:`LINKED_TABLES` gets its ``turn_id`` in the same transaction. An open row of
        the same record and agent with the same nonce (an attempt a crash interrupted) is
        returned instead: the attempt goes on in it; one with another nonce was superseded
        by this attempt and is ABANDONED.
        """
        key = serves.key_text
        with self._writing() as c:
            # Through the writing (redacting) connection: a key is stored redacted.
            found = c.execute(
                "SELECT * FROM turn_journal WHERE record = ? AND record_key = ? AND agent = ?"
                " AND state IN ('handed', 'delivered') ORDER BY id",
                (serves.record, key, agent),
            ).fetchall()
            for old in map(_row, found):
                if nonce is None or old.nonce in (None, nonce):
                    return old
                self.journal_move(old.id, JournalState.ABANDONED, outcome="superseded")
            attempt = c.execute(
                "SELECT COALESCE(MAX(attempt), 0) + 1 FROM turn_journal"
                " WHERE record = ? AND record_key = ?",
                (serves.record, key),
            ).fetchone()[0]
            said: dict[str, t.Any] = {"agent": agent, "workflow": serves.workflow.value}
            said["record"] = serves.record
            said |= {"attempt": attempt, "nonce": nonce}
            values = said | {"record_key": key, "state": "handed", "digest": prompt_digest(text)}
            values |= {"length": len(text), "head": text[:HEAD_CHARS], "conversation": conversation}
            values |= {"start_line": start_line, "started": self._clock()}
            entry = _row(insert(c, "turn_journal", values))
            columns = LINKED_TABLES.get(serves.record)
            if columns is not None and len(columns) == len(serves.key):
                match = " AND ".join(f"{col} = ?" for col in columns)
                sql = f"UPDATE {serves.record} SET turn_id = ? WHERE {match}"
                c.execute(sql, (entry.id, *serves.key))
        self._audit.append("journal.hand", id=entry.id, key=key, **said)
        return entry

    def journal_move(
        self,
        turn_id: int,
        state: JournalState,
        *,
        outcome: str | None = None,
        proof: t.Mapping[str, t.Any] | None = None,
        conversation: str | None = None,
    ) -> JournalRow | None:
        """Move row ``turn_id`` to ``state`` (a no-op when it is there already).

        Returns
        -------
        JournalRow | None
            The row after the change; None when there is no such row.

        Raises
        ------
        TransitionRejected
            :data:`JOURNAL_TRANSITIONS` does not allow it.
        """
        now = self._clock()
        with self._writing() as c:
            row = c.execute("SELECT * FROM turn_journal WHERE id = ?", (turn_id,)).fetchone()
            if row is None:
                return None
            old = JournalState(row["state"])
            if old is state:
                return _row(row)
            journal_step(f"turn {turn_id} of {row['agent']}", old, state)
            stamp = "delivered" if state is JournalState.DELIVERED else "ended"
            row = c.execute(
                f"UPDATE turn_journal SET state = ?, {stamp} = ?,"
                " outcome = COALESCE(?, outcome), proof = COALESCE(?, proof),"
                " conversation = COALESCE(?, conversation) WHERE id = ? RETURNING *",
                (
                    state.value,
                    now,
                    outcome,
                    None if proof is None else json.dumps(dict(proof), sort_keys=True),
                    conversation,
                    turn_id,
                ),
            ).fetchone()
        self._audit.append(
            "journal.state", id=turn_id, old=old.value, new=state.value, outcome=outcome
        )
        return _row(row)

    def journal_end_nonce(self, agent: str, nonce: str, outcome: str) -> list[int]:
        """End the open rows of ``agent``'s turn ``nonce`` (the loop ends its turns so).

        A DELIVERED row ENDS with ``outcome``; one still HANDED was never confirmed and is
        ABANDONED, unless its message is still DELIVERING: that delivery (or the recovery
        after a crash) settles the row with the message. Returns the ids of the rows ended.
        """
        with self._writing() as c:
            typing = {r[0] for r in c.execute(_TYPING, (agent,))}
            rows = [r for r in self.journal_open(agent=agent, nonce=nonce) if r.id not in typing]
            for row in rows:
                done = (
                    JournalState.ENDED
                    if row.state is JournalState.DELIVERED
                    else JournalState.ABANDONED
                )
                self.journal_move(row.id, done, outcome=outcome)
        return [r.id for r in rows]

    def journal_lease(
        self, turn_id: int, *, work: str, node: str, epoch: int, until: float
    ) -> JournalRow | None:
        """Write the fleet lease a prompt is typed under, before the paste.

        A row of another work, or with a higher epoch already, keeps what it has and is
        returned as it is: the caller compares.
        """
        with self._writing() as c:
            row = c.execute(
                "UPDATE turn_journal SET work = ?, node = ?, epoch = ?, lease_until = ?"
                " WHERE id = ? AND (work IS NULL OR (work = ? AND epoch <= ?)) RETURNING *",
                (work, node, epoch, until, turn_id, work, epoch),
            ).fetchone()
        if row is None:
            return self.journal_row(turn_id)
        self._audit.append("journal.lease", id=turn_id, work=work, node=node, epoch=epoch)
        return _row(row)

    def journal_verdict(self, turn_id: int, verdict: str) -> None:
        """Record the queue's word on a fleet row's result (accepted, or rejected and why)."""
        with self._writing() as c:
            c.execute("UPDATE turn_journal SET verdict = ? WHERE id = ?", (verdict, turn_id))
        self._audit.append("journal.verdict", id=turn_id, verdict=verdict)

    def journal_of_work(self, work: str) -> list[JournalRow]:
        """Every row typed under a lease of fleet work ``work``, oldest first."""
        return self._all(_row, "SELECT * FROM turn_journal WHERE work = ? ORDER BY id", work)

    def journal_leased(self, limit: int = 50) -> list[JournalRow]:
        """The newest rows typed under a fleet lease (``poli fleet status``), newest first."""
        sql = "SELECT * FROM turn_journal WHERE work IS NOT NULL ORDER BY id DESC LIMIT ?"
        return self._all(_row, sql, limit)

    def journal_conversation(self, agent: str, conversation: str | None = None) -> str:
        """``agent``'s CLI conversation id, as its newest row that names one keeps it.

        With ``conversation`` (the id its CLI named now), the agent's newest row is told
        first (a CLI may name it after the turn's end); "" when no row names one.
        """
        if conversation:
            with self._writing() as c:
                c.execute(
                    "UPDATE turn_journal SET conversation = ? WHERE id ="
                    " (SELECT MAX(id) FROM turn_journal WHERE agent = ?)",
                    (conversation, agent),
                )
        sql = (
            "SELECT conversation FROM turn_journal WHERE agent = ?"
            " AND conversation IS NOT NULL ORDER BY id DESC LIMIT 1"
        )
        return self._one(lambda row: str(row[0]), sql, agent) or ""

    def journal_row(self, turn_id: int) -> JournalRow | None:
        """The row ``turn_id``, if any."""
        return self._one(_row, "SELECT * FROM turn_journal WHERE id = ?", turn_id)

    def journal_of(self, record: str, key: tuple[str | int, ...]) -> list[JournalRow]:
        """Every attempt at one workflow record, oldest first."""
        sql = "SELECT * FROM turn_journal WHERE record = ? AND record_key = ? ORDER BY id"
        return self._all(_row, sql, record, json.dumps(list(key), ensure_ascii=False))

    def journal_open(
        self,
        *,
        agent: str | None = None,
        workflow: Workflow | None = None,
        record: str | None = None,
        nonce: str | None = None,
    ) -> list[JournalRow]:
        """The rows in flight (HANDED or DELIVERED), oldest first, optionally filtered."""
        sql, args = where(agent=agent, workflow=workflow, record=record, nonce=nonce)
        sql = f"{sql} {'AND' if sql else 'WHERE'} state IN ('handed', 'delivered')"
        return self._all(_row, f"SELECT * FROM turn_journal{sql} ORDER BY id", *args)
