"""The run store's messages: queued prompts and their delivery states."""

from __future__ import annotations

import sqlite3
import typing as t

from politerm.errors import StoreError
from politerm.store._core import StoreCore
from politerm.store._rows import _json, _message, _states
from politerm.store._tables import insert, where
from politerm.store.limits import PAUSED_SQL
from politerm.store.models import Message
from politerm.store.turns import SENDABLE_STATES, MessageState, message_step


class MessageRows(StoreCore):
    """The run store's messages: queued prompts and their delivery states."""

    # --- messages -------------------------------------------------------------------------

    def add_message(
        self,
        *,
        task_id: str | None,
        sender: str,
        recipient: str,
        type: str,
        msg_id: str,
        body: str,
        header: t.Mapping[str, t.Any],
        nonce: str | None = None,
        dedupe_key: str,
        state: MessageState = MessageState.QUEUED,
        text: str | None = None,
        ttl: float | None = None,
    ) -> Message | None:
        """Add a message unless one with ``dedupe_key`` exists.

        Re-parsing the same block after a crash or a screen redraw yields the same
        ``dedupe_key``, so it adds nothing the second time.

        Parameters
        ----------
        task_id
            The task it belongs to (must exist), or None.
        sender, recipient
            Agent names.
        type, msg_id, nonce, header, body
            From the tagged block it was parsed from.
        dedupe_key
            Unique identity of the message.
        state
            Initial state, normally QUEUED (PARSED when it still needs vetting).
        text
            The exact prompt text, if already rendered.
        ttl
            Seconds from now after which an undelivered message expires.

        Returns
        -------
        Message or None
            The new row, or None when ``dedupe_key`` was taken (nothing is written).
        """
        now = self._clock()
        said = {
            "task_id": task_id,
            "sender": sender,
            "recipient": recipient,
            "type": type,
            "msg_id": msg_id,
            "nonce": nonce,
            "dedupe_key": dedupe_key,
            "state": MessageState(state).value,
            "deadline": None if ttl is None else now + ttl,
            "body": body,
        }
        values = said | {"header": _json(header), "text": text, "created": now, "updated": now}
        with self._writing() as c:
            try:
                row = insert(c, "messages", values, "ON CONFLICT (dedupe_key) DO NOTHING")
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: cannot add message: {e}"
                raise StoreError(msg) from e
            if row is None:
                return None
            message = _message(row)
        self._audit.append("message.add", id=message.id, header=message.header, **said)
        return message

    def transition(
        self,
        message_id: int,
        new_state: MessageState,
        *,
        expect: MessageState | t.Collection[MessageState] | None = None,
        error: str | None = None,
        evidence: str | None = None,
        turn_nonce: str | None = None,
        text: str | None = None,
    ) -> Message:
        """Move a message to ``new_state`` atomically (compare-and-set).

        Parameters
        ----------
        message_id
            The message's row id.
        new_state
            The target state; see :data:`~politerm.store.models.MESSAGE_TRANSITIONS`.
        expect
            The state(s) the caller believes the message is in; anything else raises, so two
            racing routers cannot both act on one message.
        error
            Stored as ``last_error``.
        evidence
            What showed the new state (e.g. the screen line that proved delivery).
        turn_nonce
            Nonce of the prompt carrying the message; set when delivery starts.
        text
            The exact prompt text, once rendered.

        Returns
        -------
        Message
            The row after the change. Entering DELIVERING increments ``attempts``.

        Raises
        ------
        StoreError
            No such message, its state is not one of ``expect``, or the transition is not
            allowed.
        """
        new_state = MessageState(new_state)
        expected = None if expect is None else _states(expect)
        with self._writing() as c:
            row = c.execute("SELECT state FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                msg = f"run store {self._path}: no message {message_id}"
                raise StoreError(msg)
            old = MessageState(row[0])
            if expected is not None and old not in expected:
                want = "|".join(sorted(s.value for s in expected))
                msg = f"message {message_id} is {old.value}, expected {want}"
                raise StoreError(msg)
            message_step(f"message {message_id}", old, new_state)
            given = {"last_error": error, "evidence": evidence, "turn_nonce": turn_nonce}
            changes: dict[str, t.Any] = {k: v for k, v in given.items() if v is not None}
            changes |= {"state": new_state.value, "updated": self._clock()}
            if text is not None:
                changes["text"] = text
            assignments = ", ".join(f"{k} = ?" for k in changes)  # keys are our own names
            if new_state is MessageState.DELIVERING:
                assignments += ", attempts = attempts + 1"
            row = c.execute(
                f"UPDATE messages SET {assignments} WHERE id = ? RETURNING *",
                [*changes.values(), message_id],
            ).fetchone()
            message = _message(row)
        self._audit.append(
            "message.transition",
            id=message_id,
            old=old.value,
            new=new_state.value,
            attempts=message.attempts,
            error=error,
            evidence=evidence,
            turn_nonce=turn_nonce,
            text=text,
        )
        return message

    def next_queued(
        self,
        recipient: str,
        *,
        task_id: str | None = None,
        types: t.Collection[str] | None = None,
    ) -> Message | None:
        """Return the oldest QUEUED or RETRIED message for ``recipient`` not past its TTL.

        ``task_id`` and ``types`` narrow the choice (a turn's own nudge or retry goes ahead
        of other tasks' messages).
        """
        sql, args = where(
            recipient=recipient,
            state=SENDABLE_STATES,
            task_id=task_id,
            type=None if types is None else tuple(types),
        )
        sql += " AND (deadline IS NULL OR deadline > ?) ORDER BY id LIMIT 1"
        return self._one(_message, f"SELECT * FROM messages{sql}", *args, self._clock())

    def list_messages(
        self,
        *,
        task_id: str | None = None,
        state: MessageState | t.Collection[MessageState] | None = None,
        recipient: str | None = None,
    ) -> list[Message]:
        """Return messages matching every filter given, oldest first."""
        states = None if state is None else _states(state)
        sql, args = where(task_id=task_id, recipient=recipient, state=states)
        return self._all(_message, f"SELECT * FROM messages{sql} ORDER BY id", *args)

    def count_messages(self, task_id: str, type: str) -> int:
        """How many messages of ``type`` the task has (in any state)."""
        with self._reading() as c:
            row = c.execute(
                "SELECT COUNT(*) FROM messages WHERE task_id = ? AND type = ?", (task_id, type)
            ).fetchone()
        return int(row[0])

    def get_message(self, message_id: int) -> Message | None:
        """Return the message with row id ``message_id``, or None."""
        return self._one(_message, "SELECT * FROM messages WHERE id = ?", message_id)

    def find_message(self, dedupe_key: str) -> Message | None:
        """Return the message with ``dedupe_key``, or None."""
        return self._one(_message, "SELECT * FROM messages WHERE dedupe_key = ?", dedupe_key)

    def expire_messages(self, now: float) -> list[Message]:
        """Mark QUEUED/RETRIED messages whose deadline has passed as DEAD ("ttl expired").

        A message to an agent waiting for a usage limit to reset does not expire meanwhile
        (see :mod:`politerm.store.limits`).

        Parameters
        ----------
        now
            Epoch seconds; messages with ``deadline <= now`` expire.

        Returns
        -------
        list of Message
            The messages expired by this call, after the change.
        """
        sendable = sorted(s.value for s in SENDABLE_STATES)
        with self._writing() as c:
            rows = c.execute(
                "UPDATE messages SET state = ?, last_error = 'ttl expired', updated = ?"
                " WHERE state IN (?, ?) AND deadline IS NOT NULL AND deadline <= ?"
                f" AND NOT {PAUSED_SQL.format(col='messages.recipient')}"
                " RETURNING *",
                (MessageState.DEAD.value, self._clock(), *sendable, now),
            ).fetchall()
            expired = sorted((_message(r) for r in rows), key=lambda m: m.id)
        if expired:
            self._audit.append("message.expire", ids=[m.id for m in expired], now=now)
        return expired
