"""Messages between agents in the run store: requests, responses, acks and dead letters.

The table comes from the ``mail`` migration (see :mod:`politerm.store.db`). A message's body
lives in a file of the session's private message directory (see
:mod:`politerm.messaging.files`); the row holds its path, size and SHA-256, and every change
of state. States and the changes allowed between them are data
(:mod:`politerm.store.mailstates`); :meth:`Mailbox.transition` applies one as a
compare-and-set and rejects the rest, so two processes can never both deliver or answer the
same message.
"""

from __future__ import annotations

import dataclasses
import enum
import typing as t

from politerm.errors import MessageNotFound, StoreError
from politerm.store._tables import StoreTables, insert, row_mapper, where
from politerm.store.limits import PAUSED_SQL
from politerm.store.mailstates import MAIL_TRANSITIONS, MailState

if t.TYPE_CHECKING:
    from collections.abc import Iterable


class MailKind(str, enum.Enum):
    """A request for work, or the notification that carries a response back."""

    REQUEST = "request"
    RESPONSE = "response"


class Capability(str, enum.Enum):
    """What a request lets its receiver do; READONLY turns write approvals into denials."""

    READONLY = "readonly"
    WRITABLE = "writable"


@dataclasses.dataclass(frozen=True)
class Mail:
    """One message as stored."""

    id: str
    kind: MailKind
    session: str
    sender: str
    sender_pane: str | None
    recipient: str
    recipient_pane: str
    capability: Capability
    reply_to: str | None
    body_path: str
    size: int
    sha256: str
    response_path: str | None
    state: MailState
    reason: str | None
    attempts: int
    max_attempts: int
    created: float
    updated: float
    expires: float
    delivered: float | None
    started: float | None
    responded: float | None
    turn_id: int | None = None
    """Its delivery's row in the journal of turns (:mod:`politerm.store.journal`)."""
    origin: str | None = None
    """The fleet node its sender is on, for a copy of a request typed here by this node.

    Such a copy is never queued (its node delivers it, under the work's lease), and its
    response goes back to that node (:mod:`politerm.messaging.fleetmail`)."""

    def to_json(self) -> dict[str, t.Any]:
        """A JSON-ready dict (enum members by value)."""
        out = dataclasses.asdict(self)
        for key in ("kind", "capability", "state"):
            out[key] = out[key].value
        return out


_mail = row_mapper(Mail, kind=MailKind, capability=Capability, state=MailState)


_STAMPS: t.Final = frozenset({"delivered", "started", "responded"})
# A recipient with an open usage limit: its messages' clocks stand still.
_PAUSED: t.Final = PAUSED_SQL.format(col="mail.recipient")


class Mailbox(StoreTables):
    """The ``mail`` table of a :class:`~politerm.store.RunStore` (its connection and audit log).

    Parameters
    ----------
    store
        The open run store.
    redactor
        Applied to every reason before it is written (reasons quote screens).
    """

    def add(
        self,
        *,
        id: str,
        kind: MailKind,
        session: str,
        sender: str,
        sender_pane: str | None,
        recipient: str,
        recipient_pane: str,
        capability: Capability,
        body_path: str,
        size: int,
        sha256: str,
        ttl: float,
        max_attempts: int,
        reply_to: str | None = None,
        origin: str | None = None,
    ) -> tuple[Mail, bool]:
        """Queue a message; return it and whether it is new.

        The id is the dedupe key: adding an id twice changes nothing and returns the first.
        A copy of a request from fleet node ``origin`` is written DELIVERING, its first
        attempt counted: the node that writes it types it at once, and no postman ever
        takes it from a queue.
        """
        now = self._now()
        said: dict[str, t.Any] = {"id": id, "sender": sender, "recipient": recipient}
        said |= {"capability": capability.value, "size": size, "sha256": sha256}
        values = said | {"kind": kind.value, "session": session, "sender_pane": sender_pane}
        values |= {"recipient_pane": recipient_pane, "reply_to": reply_to, "origin": origin}
        values |= {"body_path": body_path, "max_attempts": max_attempts, "expires": now + ttl}
        state = MailState.QUEUED if origin is None else MailState.DELIVERING
        values |= {"state": state.value, "attempts": int(origin is not None)}
        with self.store._writing() as c:
            row = insert(
                c, "mail", values | {"created": now, "updated": now}, "ON CONFLICT DO NOTHING"
            )
            mail = _mail(c.execute("SELECT * FROM mail WHERE id = ?", (id,)).fetchone())
        if row is not None:
            said |= {} if origin is None else {"origin": origin}
            self._audit(
                "mail.queued" if origin is None else "mail.arrived", type=kind.value, **said
            )
        return mail, row is not None

    def get(self, mail_id: str) -> Mail | None:
        """The message with this id, if any."""
        return self.store._one(_mail, "SELECT * FROM mail WHERE id = ?", mail_id)

    def require(self, mail_id: str) -> Mail:
        """The message with this id.

        Raises
        ------
        MessageNotFound
            No message has it.
        """
        mail = self.get(mail_id)
        if mail is None:
            msg = f"no message {mail_id!r} in {self.store.path}"
            raise MessageNotFound(msg)
        return mail

    def select(
        self,
        *,
        states: Iterable[MailState] = (),
        recipient: str | None = None,
        sender: str | None = None,
        kind: MailKind | None = None,
        limit: int = 1000,
    ) -> list[Mail]:
        """Messages matching every given filter, oldest first."""
        sql, args = where(
            state=tuple(states) or None, recipient=recipient, sender=sender, kind=kind
        )
        sql = f"SELECT * FROM mail{sql} ORDER BY created, id LIMIT ?"
        return self.store._all(_mail, sql, *args, limit)

    def inbox(self, agent: str) -> list[Mail]:
        """What ``agent`` should see: messages to it, and its own requests that ended badly.

        Dead and expired requests show in the sender's inbox too, so a sender learns that
        its message will never be answered.
        """
        sql = (
            "SELECT * FROM mail WHERE recipient = ?"
            " OR (sender = ? AND kind = 'request' AND state IN ('dead', 'expired', 'responded'))"
            " ORDER BY created, id"
        )
        return self.store._all(_mail, sql, agent, agent)

    def next_queued(self, recipient: str) -> Mail | None:
        """The oldest queued message for ``recipient``."""
        found = self.select(states=[MailState.QUEUED], recipient=recipient, limit=1)
        return found[0] if found else None

    def recipients_waiting(self) -> list[str]:
        """Recipients with at least one queued message."""
        sql = "SELECT DISTINCT recipient FROM mail WHERE state = 'queued' ORDER BY recipient"
        return self.store._all(lambda row: str(row[0]), sql)

    def transition(
        self,
        mail_id: str,
        new: MailState,
        *,
        reason: str | None = None,
        count_attempt: bool = False,
        **fields: t.Any,
    ) -> Mail | None:
        """Move a message to ``new`` if that change is allowed from its current state.

        Returns the updated message, or ``None`` when the change is not allowed (another
        process got there first, or the message is final). ``fields`` may set
        ``response_path`` and the ack stamps ``delivered``/``started``/``responded``
        (``True`` means now).

        Raises
        ------
        MessageNotFound
            No message has this id.
        """
        allowed = {"response_path", *_STAMPS}
        unknown = set(fields) - allowed
        if unknown:
            msg = f"cannot set {sorted(unknown)} on a message"
            raise StoreError(msg)
        now = self._now()
        changes = {"state": new.value, "updated": now}
        changes |= {key: now if value is True else value for key, value in fields.items()}
        if reason is not None:
            changes["reason"] = self.redactor.redact(reason)
        sets = [f"{key} = ?" for key in changes] + ["attempts = attempts + 1"] * count_attempt
        olds = [s.value for s, targets in MAIL_TRANSITIONS.items() if new in targets]
        with self.store._writing() as c:
            row = c.execute("SELECT state FROM mail WHERE id = ?", (mail_id,)).fetchone()
            if row is None:
                msg = f"no message {mail_id!r} in {self.store.path}"
                raise MessageNotFound(msg)
            if not olds:
                return None
            updated = c.execute(
                f"UPDATE mail SET {', '.join(sets)} WHERE id = ?"
                f" AND state IN ({', '.join('?' * len(olds))}) RETURNING *",
                [*changes.values(), mail_id, *olds],
            ).fetchone()
        if updated is None:
            return None
        mail = _mail(updated)
        self._audit("mail.state", id=mail_id, old=row[0], state=new.value, reason=mail.reason)
        return mail

    def due_to_expire(self, now: float | None = None) -> list[Mail]:
        """Queued or delivered messages whose time to live has passed.

        Not those to a recipient waiting for a usage limit to reset: their clock stands
        still meanwhile (see :mod:`politerm.store.limits`).
        """
        sql = (
            "SELECT * FROM mail WHERE state IN ('queued', 'delivered') AND expires <= ?"
            f" AND NOT {_PAUSED} ORDER BY expires, created, id"
        )
        return self.store._all(_mail, sql, self._now() if now is None else now)

    def next_expiry(self) -> float | None:
        """When the next queued or delivered message expires, if any (limits aside)."""
        sql = "SELECT MIN(expires) FROM mail WHERE state IN ('queued', 'delivered') AND NOT "
        return self.store._one(lambda row: row[0], sql + _PAUSED)

    def answered_with(self, response_path: str) -> Mail | None:
        """The request already answered by the file at ``response_path``, if any."""
        sql = (
            "SELECT * FROM mail WHERE response_path = ? AND kind = 'request'"
            " AND state = 'responded' ORDER BY created, id LIMIT 1"
        )
        return self.store._one(_mail, sql, response_path)


# MailState is re-exported: every reader of a message row names its state.
__all__ = ["Capability", "Mail", "MailKind", "MailState", "Mailbox"]
