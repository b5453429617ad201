"""The messaging side of ``poli node``: a copy of each request it types, for ``poli reply``.

A node that claims a message for an agent it hosts (:mod:`politerm.messaging.fleetmail`)
writes the request into this machine's store and message directory first — with this
machine's directory and the agent's pane here, and ``origin`` naming the sender's node —
then types it (:meth:`politerm.engine.node.Node`). ``poli reply`` in the receiver's pane
finds that copy as it finds a local request, and posts the response back to ``origin``.
"""

from __future__ import annotations

import time
import typing as t

from politerm.engine.letters import Letter
from politerm.errors import MessagingError
from politerm.messaging.fleetmail import MailWork
from politerm.messaging.postman import readonly_policy
from politerm.messaging.service import Identity, Messenger
from politerm.store.mail import Capability, MailState

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.config import Config
    from politerm.store import RunStore


class NodeLetters:
    """A node's :class:`~politerm.engine.letters.Letters`: copies in this machine's store.

    Parameters
    ----------
    config
        The project's configuration (its session's message directory, as ``poli reply``
        in an agent's pane finds it).
    store
        This machine's run store.
    """

    def __init__(self, config: Config, store: RunStore) -> None:
        self.m = Messenger(config, store)

    def take(self, work_id: str, agent: str, payload: Mapping[str, t.Any]) -> Letter:
        """The letter to type for a message work; its copy written here first.

        Raises
        ------
        MessagingError
            The payload is no message, or its copy here has ended (answered, expired, dead).
        """
        work = MailWork.from_payload(work_id, payload)
        copy = self.m.mailbox.get(work.mail_id)
        if copy is None:
            known = self.m.store.get_agent(agent)
            pane = known.pane_id if known is not None else ""
            copy = self.m.write_request(
                work.mail_id,
                work.body.encode(),
                sender=Identity(work.sender, None),
                recipient=agent,
                pane=pane,
                capability=work.capability,
                ttl=work.ttl,
                max_attempts=1,
                origin=work.origin,
            )
            self.m.touch(copy)
        elif copy.state in (MailState.DELIVERED, MailState.RESPONDED):
            return Letter(copy.id, "", None, 0.0, f"{copy.state.value} here: {copy.reason or ''}")
        elif copy.state.is_final:
            msg = f"message {copy.id} is {copy.state.value} on this node: {copy.reason or ''}"
            raise MessagingError(msg)
        # DELIVERING: new, or an earlier attempt here did not get it in.
        policy = readonly_policy() if copy.capability is Capability.READONLY else None
        ttl = max(1.0, copy.expires - time.time())
        return Letter(copy.id, self.m.request_text(copy), policy, ttl)

    def delivered(self, letter: Letter, reason: str) -> None:
        """The receiver has it: the copy is DELIVERED (``poli reply`` may answer it)."""
        copy = self.m.mailbox.require(letter.mail_id)
        self.m.change(copy, MailState.DELIVERED, delivered=True, started=True, reason=reason)

    def ended(self, letter: Letter, reason: str) -> None:
        """The receiver exited: the copy is a dead letter."""
        copy = self.m.mailbox.require(letter.mail_id)
        self.m.change(copy, MailState.DEAD, reason=reason)
