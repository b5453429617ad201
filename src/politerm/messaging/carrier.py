"""Messages to agents on other nodes of the fleet: carried as work, answered by their node.

The postman's lane for a receiver that runs elsewhere (:func:`politerm.engine.placement.elsewhere`,
or a message addressed to :data:`~politerm.messaging.fleetmail.REMOTE_PANE`) hands it to a
:class:`Carrier`: each attempt is posted to the receiver's stream on the fleet's queue as
work, and the hosting node's reply is applied as a local delivery's would be (DELIVERED,
QUEUED again for another attempt, or DEAD). Responses other nodes send to this machine's
requests are taken as they come (:meth:`Carrier.responses`).
"""

from __future__ import annotations

import asyncio
import time
import typing as t

from politerm._internal.aio import stop_if_cancelled
from politerm.driver import Outcome
from politerm.errors import FleetError, MessagingError, WorkInvalid
from politerm.messaging.fleetmail import DEAD_LETTERED, REMOTE_PANE
from politerm.store.mail import Mail, MailKind, MailState

if t.TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from politerm.engine.turnwork import TurnReply
    from politerm.messaging.fleetmail import FleetMail
    from politerm.messaging.service import Messenger

# Longest one wait on the fleet's queue blocks a thread (a reply, a response).
_REMOTE_LOOK = 1.0
# After the fleet's Redis could not be reached, how long before trying again.
_REMOTE_BACKOFF = 1.0


class Carrier:
    """Carries one session's requests to receivers on other nodes, one at a time per receiver.

    Parameters
    ----------
    messenger
        The session's messages.
    fleet
        The fleet's messaging; None where this machine has no ``[fleet]`` (a message to a
        receiver elsewhere then becomes a dead letter).
    say
        Receives one line per notable step.
    dead_letters
        Makes every open message to a receiver a dead letter, with the reason.
    wake
        Set when a response came from another node (the postman looks again).
    """

    def __init__(
        self,
        messenger: Messenger,
        fleet: FleetMail | None,
        *,
        say: Callable[[str], None],
        dead_letters: Callable[[str, str], None],
        wake: asyncio.Event,
    ) -> None:
        self.m = messenger
        self.fleet = fleet
        self.say = say
        self._dead_letters = dead_letters
        self.wake = wake

    def open(self, states: Sequence[MailState] | None = None) -> list[Mail]:
        """Requests to agents on other nodes that still wait (to be delivered or answered)."""
        waiting = states or (MailState.QUEUED, MailState.DELIVERING, MailState.DELIVERED)
        found = self.m.mailbox.select(states=waiting, kind=MailKind.REQUEST)
        return [m for m in found if m.recipient_pane == REMOTE_PANE]

    async def lane(self, recipient: str) -> None:
        """Carry ``recipient``'s messages to its node one at a time, each attempt as work."""
        while True:
            stop_if_cancelled()
            carried = [m for m in self.open([MailState.DELIVERING]) if m.recipient == recipient]
            mail = carried[0] if carried else self.m.mailbox.next_queued(recipient)
            if mail is None:
                return
            if self.fleet is None:
                self._dead_letters(recipient, f"{recipient} runs on another node: no [fleet] here")
                return
            if mail.state is MailState.QUEUED:
                claimed = self.m.change(mail, MailState.DELIVERING, count_attempt=True)
                if claimed is None:
                    continue
                mail = claimed
            await self._carry(self.fleet, mail)

    async def _carry(self, fleet: FleetMail, mail: Mail) -> None:
        """One attempt: posted to the receiver's stream, then its node's reply applied.

        After a restart the same work is posted again (one is kept). Past its time to live,
        a message no node holds a live lease on is a dead letter; one a node holds waits for
        that node's word (the node bounds the receiver's turn by the same time).
        """
        work_id: str | None = None
        while True:
            stop_if_cancelled()
            now = self.m.mailbox.get(mail.id)
            if now is None or now.state is not MailState.DELIVERING:
                return  # answered meanwhile, or ended
            try:
                if work_id is None:
                    work_id = await asyncio.to_thread(fleet.post, now)
                reply = await asyncio.to_thread(fleet.reply, work_id, _REMOTE_LOOK)
                late = reply is None and now.expires <= time.time()
                if late and not await asyncio.to_thread(fleet.held, work_id):
                    why = f"no node of {now.recipient} took it within its time to live"
                    self.m.change(now, MailState.DEAD, reason=f"{why} (work {work_id})")
                    return
            except WorkInvalid as exc:  # the queue refuses it: trying again changes nothing
                self.m.change(now, MailState.DEAD, reason=f"the fleet refused it: {exc}")
                return
            except FleetError as exc:
                self.say(f"postman: {mail.id}: {exc}")
                await asyncio.sleep(_REMOTE_BACKOFF)
                continue
            if reply is not None:
                self._reply(now, reply)
                return

    def _reply(self, mail: Mail, reply: TurnReply) -> None:
        """The hosting node's word on one attempt, applied as a local delivery's would be."""
        where = f" on node {reply.node} (epoch {reply.epoch})" if reply.node else ""
        if reply.delivered:
            said = f": {reply.error}" if reply.error else ""
            self.m.delivered(mail, f"delivered{where}{said}")
            self.say(f"{mail.id} delivered to {mail.recipient}{where}")
            if reply.outcome == "exited":
                self._dead_letters(mail.recipient, f"receiver {mail.recipient} exited{where}")
            return
        why = f"attempt {mail.attempts}: {reply.outcome}{where}: {reply.error}"
        if reply.outcome in (Outcome.AGENT_EXITED.value, DEAD_LETTERED):
            self.m.change(mail, MailState.DEAD, reason=why)
        else:
            self.m.not_delivered(mail, why)

    async def responses(self, fleet: FleetMail) -> None:
        """Take the responses other nodes send to this machine's requests, as they come."""
        said = ""
        while True:
            try:
                got = await asyncio.to_thread(fleet.take_response, _REMOTE_LOOK)
            except (FleetError, MessagingError) as exc:
                if str(exc) != said:  # once per new error, not once a second while it lasts
                    said = str(exc)
                    self.say(f"postman: responses from the fleet: {said}")
                await asyncio.sleep(_REMOTE_BACKOFF)
                continue
            said = ""
            if got is not None:
                self.say(f"{got} answered from another node")
                self.wake.set()
