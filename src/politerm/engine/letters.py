"""A message between agents as fleet work: what the node hosting its receiver types.

``poli send`` (or the MCP ``send_message`` tool) to an agent hosted on another node posts
the message as work of kind ``message`` to that agent's stream
(:mod:`politerm.messaging.fleetmail` writes and reads the payload). The node that claims it
asks its :class:`Letters` — the messaging side, which keeps a copy of the request in this
machine's store so that ``poli reply`` here finds it — for the :class:`Letter` to type,
types it through the agent's driver under the work's lease as it types a loop turn, follows
the receiver's turn to its end, and reports a :class:`~politerm.engine.turnwork.TurnReply`
(delivered or not, and why; no blocks) that the sender's postman applies to its message.
"""

from __future__ import annotations

import dataclasses
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.agents.approval import ApprovalPolicy

#: The work kind of a message between agents.
MESSAGE_KIND: t.Final = "message"


@dataclasses.dataclass(frozen=True)
class Letter:
    """A request to type into a hosted agent, as this node's copy of it says.

    Parameters
    ----------
    mail_id
        The message's id (the same on the sender's machine and here; the turn's nonce).
    text
        The request as the receiver reads it here (this machine's message directory).
    policy
        The approval policy of its turn (deny-writes for a READONLY request), or None for
        the agent's own.
    ttl
        Seconds left of the message's time to live: the bound on waiting for the receiver.
    earlier
        Set when an earlier attempt on this node already got it in (the copy is delivered
        or answered): nothing is typed again, and this says so.
    """

    mail_id: str
    text: str
    policy: ApprovalPolicy | None
    ttl: float
    earlier: str | None = None


class Letters(t.Protocol):
    """The messaging side of a node (:class:`politerm.messaging.fleetmail.NodeLetters`)."""

    def take(self, work_id: str, agent: str, payload: Mapping[str, t.Any]) -> Letter:
        """The letter of a message work (its copy written first); PolitermError if malformed."""

    def delivered(self, letter: Letter, reason: str) -> None:
        """The receiver has it: its copy here is DELIVERED."""

    def ended(self, letter: Letter, reason: str) -> None:
        """It never will (the receiver exited): its copy here is a dead letter."""
