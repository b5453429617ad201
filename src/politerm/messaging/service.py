"""Sending, answering and reading messages: what ``poli send/reply/inbox/msg`` and MCP call.

Every operation writes the message's file and its row before anything is delivered; the
project's service delivers (its postman, :mod:`politerm.messaging.postman`, beside its
router), started by :meth:`Messenger.ensure_delivery` when it does not run. After every change of a
message's state a small ``<id>.state`` file is rewritten in the message directory, so a
waiter (``poli send --wait``, MCP) wakes on a file-system event instead of polling the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import time
import typing as t

from politerm.engine import service
from politerm.engine.placement import elsewhere
from politerm.errors import (
    MessageDead,
    MessageNotFound,
    MessagingError,
    NotInAgentPane,
    RecipientNotFound,
)
from politerm.messaging.files import MessageDir, message_dir_for, new_message_id, sha256_hex
from politerm.messaging.fleetmail import REMOTE_PANE, FleetMail
from politerm.messaging.protocol import render_request, response_line
from politerm.project import ENV_AGENT
from politerm.redact import Redactor
from politerm.store.mail import Capability, Mail, Mailbox, MailKind, MailState

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.store import RunStore

USER: t.Final = "user"
"""The sender name of a message sent from a plain terminal (not from an agent's pane)."""

ENV_POSTMAN: t.Final = "POLI_POSTMAN"
"""``off`` stops ``poli send``/``reply`` and MCP tools from starting the project's service."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who is speaking: an agent with its pane, or the user at a terminal."""

    agent: str
    pane: str | None


class Messenger:
    """Messages of one session: the store's mailbox and the private message directory.

    Parameters
    ----------
    config
        The session's configuration (socket, session name, store, routing limits).
    store
        The open run store.
    redactor
        Applied to every body and response before it reaches a file or the store.
    """

    def __init__(
        self, config: Config, store: RunStore, *, redactor: Redactor | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.redactor = redactor or Redactor(config.redact.patterns)
        self.mailbox = Mailbox(store, self.redactor)
        self.dir = MessageDir(message_dir_for(config))

    @property
    def session(self) -> str:
        """The tmux session the messages belong to."""
        return self.config.tmux.session

    def ensure_delivery(self, config_path: pathlib.Path | None) -> None:
        """Start the project's service (it delivers) unless it runs.

        A running service's postman wakes on the message directory's change by itself.
        ``POLI_POSTMAN=off`` leaves it alone (a test, or a postman run in a program).

        Raises
        ------
        RoutingError
            The service did not start (the message stays stored, for the next one).
        """
        if os.environ.get(ENV_POSTMAN) != "off":
            service.start(self.config, config_path)

    # --- who is who ----------------------------------------------------------------------

    def identity(self, env: t.Mapping[str, str] | None = None) -> Identity:
        """The agent this process runs in (``POLI_AGENT``), or the user."""
        env = os.environ if env is None else env
        name = env.get(ENV_AGENT)
        if not name:
            return Identity(USER, None)
        agent = self.store.get_agent(name)
        return Identity(name, agent.pane_id if agent else None)

    def resolve(self, target: str) -> tuple[str, str]:
        """``(agent name, pane id)`` of an agent name or a ``%N`` pane id.

        A pane that no agent owns is addressed by its id (a raw pane). An agent hosted on
        another node of the fleet has no pane here: :data:`REMOTE_PANE`.

        Raises
        ------
        RecipientNotFound
            No agent of that name is recorded in this session's store.
        """
        if elsewhere(self.config, target):
            return target, REMOTE_PANE  # its node types it (politerm.messaging.fleetmail)
        agents = self.store.list_agents()
        if target.startswith("%"):
            if not target[1:].isdigit():
                msg = f"--to {target!r}: not a tmux pane id (%N)"
                raise RecipientNotFound(msg)
            for agent in agents:
                if agent.pane_id == target:
                    return agent.name, target
            return target, target
        for agent in agents:
            if agent.name == target:
                return agent.name, agent.pane_id
        known = ", ".join(a.name for a in agents) or "none"
        msg = f"--to {target!r}: no such agent in session {self.session!r} (agents: {known})"
        raise RecipientNotFound(msg)

    # --- sending -------------------------------------------------------------------------

    def send(
        self,
        body: str,
        *,
        to: str,
        capability: Capability = Capability.WRITABLE,
        sender: Identity | None = None,
        ttl: float | None = None,
        max_attempts: int | None = None,
        msg_id: str | None = None,
    ) -> Mail:
        """Write a request (body file, request file, then the row) and return it, QUEUED.

        ``msg_id`` makes a retried send idempotent: the same id is stored once.
        """
        sender = sender or self.identity()
        recipient, pane = self.resolve(to)
        mail_id = msg_id or new_message_id()
        existing = self.mailbox.get(mail_id)
        if existing is not None:
            return existing
        data = self.redactor.redact(body).encode()
        mail = self.write_request(
            mail_id,
            data,
            sender=sender,
            recipient=recipient,
            pane=pane,
            capability=capability,
            ttl=ttl if ttl is not None else self.config.routing.message_ttl,
            max_attempts=max_attempts or self.config.routing.max_attempts,
        )
        self.touch(mail)
        return mail

    def write_request(
        self,
        mail_id: str,
        data: bytes,
        *,
        sender: Identity,
        recipient: str,
        pane: str,
        capability: Capability,
        ttl: float,
        max_attempts: int,
        origin: str | None = None,
    ) -> Mail:
        """Write a request's body file, request file, then its row (``data``: redacted).

        ``origin``: a copy of a request sent from that fleet node, written DELIVERING by
        the node that types it here (see :meth:`Mailbox.add`).
        """
        body_path = self.dir.write(f"{mail_id}.body", data)
        digest = sha256_hex(data)
        request = render_request(
            body=data.decode(),
            body_path=str(body_path),
            size=len(data),
            sha256=digest,
            capability=capability,
            to_pane=pane,
            msg_id=mail_id,
            msg_dir=str(self.dir.path.resolve()),
            sender=sender.agent,
            sender_pane=sender.pane,
        )
        self.dir.write(f"{mail_id}.request", request.encode())
        mail, _ = self.mailbox.add(
            id=mail_id,
            kind=MailKind.REQUEST,
            session=self.session,
            sender=sender.agent,
            sender_pane=sender.pane,
            recipient=recipient,
            recipient_pane=pane,
            capability=capability,
            body_path=str(body_path),
            size=len(data),
            sha256=digest,
            ttl=ttl,
            max_attempts=max_attempts,
            origin=origin,
        )
        return mail

    def request_text(self, mail: Mail) -> str:
        """The text to paste into the receiver's pane for ``mail``."""
        name = f"{mail.id}.request" if mail.kind is MailKind.REQUEST else f"{mail.id}.body"
        return self.dir.read(name).decode()

    # --- answering -----------------------------------------------------------------------

    def reply(
        self,
        response: str | None = None,
        *,
        to: str | None = None,
        path: str | os.PathLike[str] | None = None,
        responder: Identity | None = None,
    ) -> Mail:
        """Record the response to a request and queue the notification to its sender.

        Give the response as text, or as the ``path`` of a file (a file inside the message
        directory is used as it is; any other file is copied in). Without ``to`` the oldest
        delivered, unanswered request to the responder is answered.

        Raises
        ------
        NotInAgentPane
            Neither ``to`` nor the responder's identity says which request this answers.
        MessageDead
            The request is already answered, expired or dead.
        """
        responder = responder or self.identity()
        mail = self._request_to_answer(to, responder)
        if mail.state is MailState.RESPONDED:
            self._forward(mail)  # again: a reply whose post did not get through
            return mail
        if mail.state not in (MailState.DELIVERING, MailState.DELIVERED):
            msg = f"message {mail.id} is {mail.state.value}: {mail.reason or 'not delivered yet'}"
            raise MessageDead(msg)
        if path is not None:
            resolved = pathlib.Path(path).resolve()
            if resolved.parent == self.dir.ensure() and resolved.is_file():
                response_path = self.dir.check(resolved)
            else:
                data = self.redactor.redact(resolved.read_text(errors="replace")).encode()
                response_path = self.dir.write(f"{mail.id}.response", data)
        else:
            data = self.redactor.redact(response or "").encode()
            response_path = self.dir.write(f"{mail.id}.response", data)
        return self.record_response(mail, response_path)

    def record_response(
        self, mail: Mail, response_path: pathlib.Path, *, notify: bool = True
    ) -> Mail:
        """Mark ``mail`` RESPONDED with ``response_path`` and notify its sender's pane.

        ``notify=False`` when the sender's pane shows the response line already (the raw
        protocol, typed by hand). Idempotent: a request answered already is returned
        unchanged (a notification seen on screen twice, or a reply after the raw
        protocol's line, changes nothing).
        """
        with self.store.batch():
            done = self.mailbox.transition(
                mail.id, MailState.RESPONDED, response_path=str(response_path), responded=True
            )
            if notify and done is not None and mail.sender_pane and mail.sender != USER:
                self._queue_notification(done, response_path)
        if done is None:
            current = self.mailbox.require(mail.id)
            if current.state is MailState.RESPONDED:
                return current
            msg = f"message {mail.id} is {current.state.value}: {current.reason or 'no reason'}"
            raise MessageDead(msg)
        self.touch(done)
        self._forward(done)
        return done

    def _forward(self, mail: Mail) -> None:
        """The response to a request from another node, posted back to it (once per id)."""
        if mail.origin is None:
            return
        fleet = FleetMail.of(self)
        if fleet is None:
            msg = f"message {mail.id} came from node {mail.origin}, but poli.toml has no [fleet]"
            raise MessagingError(msg)
        fleet.forward(mail)

    def _queue_notification(self, mail: Mail, response_path: pathlib.Path) -> None:
        assert mail.sender_pane is not None
        line = response_line(mail.recipient_pane, str(response_path))
        note_id = f"{mail.id}-r"
        data = line.encode()
        body_path = self.dir.write(f"{note_id}.body", data)
        self.mailbox.add(
            id=note_id,
            kind=MailKind.RESPONSE,
            session=self.session,
            sender=mail.recipient,
            sender_pane=mail.recipient_pane,
            recipient=mail.sender,
            recipient_pane=mail.sender_pane,
            capability=Capability.WRITABLE,
            reply_to=mail.id,
            body_path=str(body_path),
            size=len(data),
            sha256=sha256_hex(data),
            ttl=self.config.routing.message_ttl,
            max_attempts=mail.max_attempts,
        )

    def _request_to_answer(self, to: str | None, responder: Identity) -> Mail:
        if to is not None:
            mail = self.mailbox.require(to)
            if mail.kind is not MailKind.REQUEST:
                msg = f"message {to} is a response notification, not a request"
                raise MessageNotFound(msg)
            return mail
        if responder.agent == USER:
            msg = (
                "poli reply: not inside a politerm agent pane (POLI_AGENT is not set); "
                "say which message this answers with --to MSG_ID"
            )
            raise NotInAgentPane(msg)
        waiting = self.mailbox.select(
            states=[MailState.DELIVERED, MailState.DELIVERING],
            recipient=responder.agent,
            kind=MailKind.REQUEST,
        )
        if not waiting:
            msg = f"poli reply: no delivered request waits for an answer from {responder.agent}"
            raise NotInAgentPane(msg)
        return waiting[0]

    def response_text(self, mail: Mail) -> str:
        """The response of an answered request."""
        if mail.response_path is None:
            msg = f"message {mail.id} has no response ({mail.state.value})"
            raise MessagingError(msg)
        return self.dir.read(mail.response_path).decode(errors="replace")

    # --- state changes -------------------------------------------------------------------

    def touch(self, mail: Mail) -> None:
        """Announce a state change of ``mail`` to file-system watchers (see module doc)."""
        self.dir.write(f"{mail.id}.state", f"{mail.state.value} {time.time():.6f}\n".encode())

    def change(self, mail: Mail, new: MailState, **kwargs: t.Any) -> Mail | None:
        """Apply a state change (see :meth:`Mailbox.transition`) and announce it."""
        changed = self.mailbox.transition(mail.id, new, **kwargs)
        if changed is not None:
            self.touch(changed)
        return changed

    def delivered(self, mail: Mail, reason: str) -> None:
        """The ack that the receiver's turn started: DELIVERED, stamped delivered and started.

        ``delivered`` is when the attempt that got through began (the DELIVERING claim), so
        that an answer written since then can be told from an older one
        (:mod:`politerm.messaging.answers`); ``started`` is now.
        """
        began = mail.updated if mail.state is MailState.DELIVERING else True
        self.change(mail, MailState.DELIVERED, delivered=began, started=True, reason=reason)

    def not_delivered(self, mail: Mail, why: str) -> MailState:
        """An attempt that did not get in: QUEUED for another, DEAD once the attempts ran out."""
        if mail.attempts < mail.max_attempts:
            self.change(mail, MailState.QUEUED, reason=why)
            return MailState.QUEUED
        reason = f"not delivered after {mail.attempts} attempts; last {why}"
        self.change(mail, MailState.DEAD, reason=reason)
        return MailState.DEAD

    def dead_letters(self, recipient: str, reason: str) -> list[Mail]:
        """Every open message to ``recipient`` becomes a dead letter with ``reason``; those."""
        open_states = [MailState.QUEUED, MailState.DELIVERING, MailState.DELIVERED]
        found = self.mailbox.select(states=open_states, recipient=recipient)
        return [m for m in found if self.change(m, MailState.DEAD, reason=reason) is not None]

    async def wait_final(self, mail_id: str, timeout: float) -> Mail:
        """Wait until ``mail_id`` is answered, expired or dead; return it.

        Woken by file-system events in the message directory, bounded by ``timeout``.

        Raises
        ------
        MessageDead
            The message expired or became a dead letter (the reason says why).
        AgentTimeout
            No final state within ``timeout`` seconds.
        """
        import watchfiles

        from politerm.errors import AgentTimeout

        root = self.dir.ensure()
        mail = self.mailbox.require(mail_id)
        stop = asyncio.Event()

        async def watch() -> None:
            # A change can land between the first read and the watch starting; the 1 s
            # empty yields are the bounded backstop that re-reads the store.
            async for _ in watchfiles.awatch(
                root,
                stop_event=stop,
                debounce=50,
                step=20,
                rust_timeout=1000,
                yield_on_timeout=True,
            ):
                if self.mailbox.require(mail_id).state.is_final:
                    return

        try:
            if not mail.state.is_final:
                async with asyncio.timeout(timeout):
                    await watch()
        except TimeoutError:
            msg = f"message {mail_id}: no response within {timeout:g}s (state {mail.state.value})"
            raise AgentTimeout(msg) from None
        finally:
            stop.set()
        mail = self.mailbox.require(mail_id)
        if mail.state is not MailState.RESPONDED:
            msg = f"message {mail_id} is {mail.state.value}: {mail.reason or 'no reason given'}"
            raise MessageDead(msg)
        return mail
