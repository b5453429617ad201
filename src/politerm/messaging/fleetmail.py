"""Messages to agents hosted on other nodes of a fleet: carried as fleet work, answered back.

With ``[fleet]``, an agent placed on another node (``[agents.X] node = "b"``, or a pool
of nodes: the router's rule, :func:`politerm.engine.placement.elsewhere`) has no pane on
this machine. A message to it is stored here as any other (QUEUED, its body redacted, with
:data:`REMOTE_PANE` as its pane); this machine's postman claims it (DELIVERING, the attempt
counted), posts it as work of kind ``message`` to the agent's stream (one work per
attempt: :func:`delivery_work_id`), and applies the hosting node's reply: DELIVERED, back
to QUEUED for another attempt, or DEAD (the receiver exited, the attempts ran out, the
fleet dead-lettered the work). The node types it under the work's lease, as a loop turn
(:mod:`politerm.engine.letters`, :mod:`politerm.messaging.nodeletters`).

The answer comes back the same way: the node keeps a copy of the request in its own store
(``origin`` names the sender's node), so ``poli reply`` (or the MCP ``reply`` tool) there
records it as usual and then posts the response as work to the stream of the sender's
node (:func:`reply_stream`), once per message (:func:`reply_work_id`). The sender's
postman claims it from there (:meth:`FleetMail.take_response`), records it (RESPONDED, and
the notification to a sender's pane) and only then completes the work.

Secrets: a body is redacted on the sender's machine before it is written, as for a local
message, so what crosses to Redis and to the other machine is the redacted text; the queue
redacts every payload string again before it reaches Redis.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.engine.letters import MESSAGE_KIND
from politerm.errors import MessagingError, ResultTimeout, WorkInvalid
from politerm.store.mail import Capability, Mail

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.engine.turnwork import TurnReply
    from politerm.fleet.nodes import NodeQueue
    from politerm.fleet.queue import WorkQueue
    from politerm.messaging.service import Messenger

#: The pane of a message's receiver that is hosted on another node (it has none here).
REMOTE_PANE: t.Final = "@fleet"
#: The suffix of a node's stream of responses to the requests sent from it.
REPLY_SUFFIX: t.Final = ".mail"
#: An outcome of a message's reply: the fleet gave up on its work (a dead letter).
DEAD_LETTERED: t.Final = "dead_lettered"


def reply_stream(node: str) -> str:
    """The stream of responses to the requests sent from ``node``.

    Examples
    --------
    >>> reply_stream("a")
    'a.mail'
    """
    return f"{node}{REPLY_SUFFIX}"


def delivery_work_id(mail: Mail) -> str:
    """The work of the message's current attempt (posting it again is the same work)."""
    return f"mail-{mail.id}-{mail.attempts}"


def reply_work_id(mail_id: str) -> str:
    """The work carrying the response to ``mail_id`` (one per message, however often sent).

    Examples
    --------
    >>> reply_work_id("m-1")
    'reply-m-1'
    """
    return f"reply-{mail_id}"


@dataclasses.dataclass(frozen=True)
class MailWork:
    """A request as its receiver's node gets it.

    Parameters
    ----------
    mail_id
        The message's id (kept on the copy).
    sender
        Who sent it (an agent's name, or ``user``).
    origin
        The sender's node: where the response goes.
    capability
        READONLY or WRITABLE.
    body
        The body, redacted.
    ttl
        Seconds left of its time to live when it was posted.
    """

    mail_id: str
    sender: str
    origin: str
    capability: Capability
    body: str
    ttl: float

    def payload(self) -> dict[str, t.Any]:
        """The work's payload.

        Examples
        --------
        >>> w = MailWork("m-1", "ORCH", "a", Capability.READONLY, "count lines", 60.0)
        >>> MailWork.from_payload("mail-m-1-1", w.payload()) == w
        True
        """
        return {
            "mail": self.mail_id,
            "sender": self.sender,
            "origin": self.origin,
            "capability": self.capability.value,
            "body": self.body,
            "ttl": self.ttl,
        }

    @classmethod
    def from_payload(cls, work_id: str, payload: Mapping[str, t.Any]) -> MailWork:
        """Read it back (the node's side).

        Raises
        ------
        MessagingError
            A field is missing or of the wrong type.
        """
        try:
            return cls(
                str(payload["mail"]),
                str(payload["sender"]),
                str(payload["origin"]),
                Capability(payload["capability"]),
                str(payload["body"]),
                float(payload["ttl"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"work {work_id}: not a message ({exc!r})"
            raise MessagingError(msg) from None


class FleetMail:
    """One machine's messaging through the fleet's queue (its postman's, ``poli reply``'s).

    Parameters
    ----------
    messenger
        This machine's messages.
    queue
        The fleet's queue.
    """

    def __init__(self, messenger: Messenger, queue: WorkQueue) -> None:
        assert messenger.config.fleet is not None
        self.m, self.queue = messenger, queue
        self.node = messenger.config.fleet.node
        self._claims: NodeQueue | None = None

    @classmethod
    def of(cls, messenger: Messenger) -> FleetMail | None:
        """The fleet's messaging for ``messenger``'s project; None without ``[fleet]``."""
        config = messenger.config
        if config.fleet is None:
            return None
        from politerm.fleet.connect import connect_config
        from politerm.fleet.queue import WorkQueue

        conn = connect_config(config.fleet)
        redact = messenger.store.redact
        return cls(
            messenger, WorkQueue.from_config(conn, config.fleet, config.project.root, redact=redact)
        )

    # --- the sender's side ----------------------------------------------------------------

    def post(self, mail: Mail) -> str:
        """Post the message's current attempt to its receiver's stream; the work's id."""
        from politerm.fleet.work import Work, WorkKind

        work_id = delivery_work_id(mail)
        body = self.m.dir.read(mail.body_path).decode(errors="replace")
        ttl = max(1.0, mail.expires - time.time())
        work = MailWork(mail.id, mail.sender, self.node, mail.capability, body, ttl)
        self.queue.submit(Work(work_id, mail.recipient, WorkKind(MESSAGE_KIND), work.payload()))
        return work_id

    def reply(self, work_id: str, wait: float) -> TurnReply | None:
        """The node's reply to a posted message (waiting up to ``wait`` s); None: not yet."""
        # Not at the module's top: `poli send` would load the block parser for nothing.
        from politerm.engine.turnwork import TurnReply
        from politerm.fleet.work import WorkState

        try:
            result = self.queue.wait_result(work_id, wait)
        except (ResultTimeout, WorkInvalid):
            return None
        if result.state is WorkState.DEAD:
            why = str(result.outcome.get("error") or "no node could deliver it")
            return TurnReply(False, DEAD_LETTERED, error=f"dead-lettered by the fleet: {why}")
        return TurnReply.from_payload(result.outcome)

    def held(self, work_id: str) -> bool:
        """Whether a node holds a live lease on the work (it may be typing it now)."""
        from politerm.fleet.work import WorkState

        record = self.queue.get(work_id)
        return (
            record is not None
            and record.state is WorkState.LEASED
            and record.expires_at > time.time()
        )

    # --- responses ------------------------------------------------------------------------

    def forward(self, copy: Mail) -> None:
        """Post the response recorded on ``copy`` (a request from another node) back to it."""
        from politerm.fleet.work import Work, WorkKind

        assert copy.origin is not None
        payload = {
            "reply_to": copy.id,
            "body": self.m.response_text(copy),
            "from": copy.recipient,
            "node": self.node,
        }
        work = Work(reply_work_id(copy.id), reply_stream(copy.origin), WorkKind(MESSAGE_KIND),
                    payload)  # fmt: skip
        self.queue.submit(work)

    def take_response(self, block: float) -> str | None:
        """Claim one response sent to this node, record it, then complete it; its message id.

        Waits up to ``block`` seconds for one. A response to a message this store does not
        know, or no longer waits for, is completed with the reason (nothing to record).
        """
        from politerm.errors import MessageDead
        from politerm.fleet.nodes import NodeQueue

        assert self.m.config.fleet is not None
        if self._claims is None:
            self._claims = NodeQueue(self.queue, self.node, self.m.config.fleet.heartbeat)
        lease = self._claims.claim([reply_stream(self.node)], block=block)
        if lease is None:
            return None
        said = lease.work.payload
        mail_id = str(said.get("reply_to", ""))
        mail = self.m.mailbox.get(mail_id) if mail_id else None
        if mail is None or mail.recipient_pane != REMOTE_PANE:
            self._claims.queue.complete(lease, {"error": f"no request {mail_id!r} sent from here"})
            return None
        data = self.m.redactor.redact(str(said.get("body", ""))).encode()
        path = self.m.dir.write(f"{mail.id}.response", data)
        try:
            done = self.m.record_response(mail, path)
        except MessageDead as exc:
            self._claims.queue.complete(lease, {"error": str(exc)})
            return mail.id
        self._claims.queue.complete(lease, {"recorded": done.state.value, "node": self.node})
        return mail.id
