"""The postman: delivers queued messages to idle receivers and watches for their answers.

Whatever routes a session runs it beside its router, over the router's own drivers (one
owner per agent: :mod:`politerm.messaging.routing`); one postman runs per session (an
``flock`` in the message directory). It stands on the agent driver: every receiver is an
:class:`~politerm.driver.AgentDriver` (the router's, or one built for an agent started
elsewhere); the driver says whether it is idle, delivers with confirmation and answers
approval questions by policy. A lane types only while it holds the driver's ``typing``
lock and has looked again under it, as the router's step does: a loop prompt and a
message to one agent are typed one after the other. The postman adds what messaging
needs on top:

- a busy receiver is never interrupted: a message waits in its inbox until the receiver is
  idle, then exactly one message is delivered and its turn is watched to the end;
- every step is written before it is acted on: QUEUED → DELIVERING (attempt counted) →
  paste and confirm → DELIVERED (the ack that the receiver's turn started; submitted and
  met by an approval question counts, as in its journal row); a failed attempt (never
  submitted) goes back to QUEUED until ``max_attempts``, then DEAD with the evidence;
- a READONLY request turns the receiver's approval policy to deny-writes for its turn;
- a receiver that exits makes its messages dead letters, with the reason;
- TTL: queued or unanswered messages past their time become EXPIRED; the clock stands
  still while the receiver waits for a usage limit to reset (its driver keeps the limit
  in the store, :mod:`politerm.store.limits`), and the receiver is kept looked at so that
  its driver sends the resume at the reset;
- after a ``kill -9``, what was in flight is the journal of turns' open rows, settled
  before anything new is sent by the driver layer's one recovery
  (:func:`politerm.driver.leftover.resume`): still in the input box → submitted; on
  screen, the receiver busy, or in its own records (hook receipts, transcript: a collapsed
  paste shows no marker) → DELIVERED; otherwise never arrived → QUEUED again (so no request
  runs twice); a DELIVERING message without a row was never typed → QUEUED;
- response lines typed by hand (``[RESPONSE from=%N] <path>``, the raw protocol) in a
  sender's pane are recognised when the sender is a politerm agent; the path must be a
  file in the session's message directory, and the line answers only the request it names,
  once, with a file written after that request's delivery began
  (:mod:`politerm.messaging.answers`).

Wake-ups are events: the message directory (``watchfiles``), the output of the panes of
senders waiting for answers, and the driver's own waits on receivers' output; bounded
backstops cover what no event announces (expiry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import re
import time
import typing as t

from politerm._internal.aio import stop_if_cancelled
from politerm._internal.pidlock import PidLock
from politerm.agents.approval import ApprovalMode, ApprovalPolicy
from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Host, Outcome
from politerm.driver.idle import wait_idle
from politerm.driver.leftover import abandon, resume
from politerm.driver.sessionagent import session_driver
from politerm.engine.placement import elsewhere
from politerm.errors import (
    MessagingError,
    PolitermError,
    UnsafeMessagePath,
)
from politerm.messaging.answers import Take, judge, named_ids
from politerm.messaging.carrier import Carrier
from politerm.messaging.fleetmail import REMOTE_PANE, FleetMail
from politerm.messaging.protocol import find_response_lines
from politerm.store.journal import JournalRow, JournalState, Serves, Workflow
from politerm.store.limits import stored_limit
from politerm.store.mail import Mail, MailKind, MailState

if t.TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from politerm.engine.fleetbudget import RouterBreaker
    from politerm.messaging.protocol import ResponseLine
    from politerm.messaging.service import Messenger
    from politerm.terminal import Snapshot

log = logging.getLogger(__name__)

READONLY_COMMANDS: t.Final = (
    r"^\s*(ls|cat|head|tail|wc|grep|rg|find|pwd|stat|file|tree|du|df)(\s|$)",
    r"^\s*git\s+(status|log|diff|show|branch|blame)(\s|$)",
)
"""Commands a READONLY turn may still run; every other approval question is denied."""

# Longest a lane waits on one receiver before re-reading its queue (expiry, new mail).
#: How often a lane whose receiver's turns the fleet's budget holds back asks again.
GATE_LOOK = 2.0
_LANE_LOOK = 30.0
# Longest the main loop sleeps with no event (expiry has no event of its own).
_BACKSTOP = 5.0
# Longest a stopping postman waits for its lanes and watcher to end.
_STOP_WAIT = 5.0


def _serves(mail: Mail) -> Serves:
    """A mail's record in the journal of turns."""
    return Serves(Workflow.MESSAGING, "mail", (mail.id,))


class PostmanLock(PidLock):
    """An exclusive lock file in the message directory; held while a postman runs."""

    def __init__(self, directory: pathlib.Path) -> None:
        super().__init__(directory / "postman.lock")


def readonly_policy() -> ApprovalPolicy:
    """Deny-writes: approve only read-only commands, deny every other tool question.

    Examples
    --------
    >>> from politerm.agents.profile import ApprovalRequest
    >>> p = readonly_policy()
    >>> p.decide(ApprovalRequest("Bash", "ls -la", ())).decision.value
    'approve'
    >>> p.decide(ApprovalRequest("Bash", "echo hi > out.txt", ())).decision.value
    'deny'
    """
    return ApprovalPolicy(ApprovalMode.DENY, tuple(re.compile(p) for p in READONLY_COMMANDS))


class Postman:
    """Delivers one session's messages (see the module doc).

    Parameters
    ----------
    messenger
        The session's messages.
    host
        The agents' terminal host (default: the configuration's private tmux server).
    say
        Receives one line per notable step.
    settle
        Seconds a receiver must stay ready before its turn counts as over.
    fleet
        The fleet's messaging (default: from the configuration's ``[fleet]``, if any).
    owned
        The drivers of the agents a router drives in this process, by name: their
        messages go through them (never a second driver of the same agent).
    gate
        The router's gate (the fleet's budget breaker), asked before a message opens a
        turn of one of ``owned``: the caps stop every turn, whoever types it.
    """

    def __init__(
        self,
        messenger: Messenger,
        host: Host | None = None,
        *,
        say: Callable[[str], None] | None = None,
        settle: float = 1.0,
        fleet: FleetMail | None = None,
        owned: Mapping[str, AgentDriver] | None = None,
        gate: RouterBreaker | None = None,
    ) -> None:
        self.m = messenger
        self.gate = gate
        self.host = host or Host.of(messenger.config)
        self.say = say or (lambda _line: None)
        self.settle = settle
        self.owned = dict(owned or {})
        self.wake = asyncio.Event()
        self.drivers: dict[str, AgentDriver] = {}
        self.lanes: dict[str, asyncio.Task[None]] = {}
        self._seen_lines: set[ResponseLine] = set()
        # Messages to agents on other nodes of the fleet go through its queue.
        self.fleet = FleetMail.of(messenger) if fleet is None else fleet
        self.carrier = Carrier(
            messenger, self.fleet, say=self.say, dead_letters=self._dead_letters, wake=self.wake
        )

    # --- receivers ------------------------------------------------------------------------

    async def driver(self, name: str, pane_id: str) -> AgentDriver | None:
        """The driver of the agent (or raw pane) ``name`` in ``pane_id``; None if it is gone."""
        agent = self.m.store.get_agent(name)
        # A pane id is unique on its own server only: an agent's row names its server.
        socket = agent.socket if agent is not None and agent.pane_id == pane_id else ""
        known = self.drivers.get(socket + pane_id)
        if known is not None:
            return known
        driver = self.owned.get(name)
        if driver is None or driver.terminal_name != pane_id:
            pane = await self.host.pane(pane_id, socket)
            if pane is None:
                return None
            driver = session_driver(self.m.config, name, pane, store=self.m.store)
        self.drivers[socket + pane_id] = driver
        return driver

    def _dead_letters(self, recipient: str, reason: str) -> None:
        """Every open message to ``recipient`` becomes a dead letter with ``reason``."""
        for mail in self.m.dead_letters(recipient, reason):
            self.say(f"{mail.id} dead: {reason}")

    # --- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver and watch until cancelled (the project's service runs it for good).

        Raises
        ------
        MessagingError
            Another postman runs for this session.
        """
        lock = PostmanLock(self.m.dir.ensure())
        if not lock.acquire():
            msg = f"another postman runs for session {self.m.session!r} ({lock.path})"
            raise MessagingError(msg)
        watchers = [asyncio.ensure_future(self._watch_dir())]
        if self.fleet is not None:
            watchers.append(asyncio.ensure_future(self.carrier.responses(self.fleet)))
        try:
            await self.settle_in_flight()
            while True:
                stop_if_cancelled()
                self.wake.clear()
                self.expire()
                self._start_lanes()
                await self._sleep(await self._scan_senders())
        finally:
            for task in (*watchers, *self.lanes.values()):
                task.cancel()
            # Bounded: a task that lost its cancel (see stop_if_cancelled) is left behind,
            # said, rather than holding the shutdown.
            tasks = [*watchers, *self.lanes.values()]
            _, left = await asyncio.wait(tasks, timeout=_STOP_WAIT)
            if left:
                log.warning("postman: %d task(s) did not stop within %gs", len(left), _STOP_WAIT)
            lock.release()
            await self.host.close()

    async def _sleep(self, senders: list[AgentDriver]) -> None:
        bound = _BACKSTOP
        nxt = self.m.mailbox.next_expiry()
        if nxt is not None:
            bound = min(bound, max(0.0, nxt - time.time()) + 0.01)
        waiters: list[asyncio.Future[t.Any]] = [asyncio.ensure_future(self.wake.wait())]
        # A sender's change counts from its mark taken here, not from when its task first runs.
        waiters += [asyncio.ensure_future(d.changed(bound, since=d.mark())) for d in senders]
        lanes: list[asyncio.Future[t.Any]] = [x for x in self.lanes.values() if not x.done()]
        try:
            await asyncio.wait([*waiters, *lanes], timeout=bound, return_when="FIRST_COMPLETED")
        finally:
            for w in waiters:
                w.cancel()

    async def _watch_dir(self) -> None:
        import watchfiles

        async for _ in watchfiles.awatch(self.m.dir.ensure(), debounce=20, step=10):
            self.wake.set()

    def expire(self) -> None:
        """Queued or unanswered messages past their time to live become EXPIRED."""
        for mail in self.m.mailbox.due_to_expire(time.time()):
            why = (
                "not delivered within its time to live"
                if mail.state is MailState.QUEUED
                else "no response within its time to live"
            )
            if self.m.change(mail, MailState.EXPIRED, reason=why) is not None:
                self.say(f"{mail.id} expired: {why}")

    def _start_lanes(self) -> None:
        # A remote message DELIVERING after a restart: its lane waits for its work's reply.
        carried = {m.recipient for m in self.carrier.open([MailState.DELIVERING])}
        for recipient in sorted({*self.m.mailbox.recipients_waiting(), *carried}):
            lane = self.lanes.get(recipient)
            if lane is None or lane.done():
                self.lanes[recipient] = asyncio.ensure_future(self._lane(recipient))

    # --- delivering -----------------------------------------------------------------------

    async def _lane(self, recipient: str) -> None:
        """Deliver ``recipient``'s queue one message at a time, each when it is idle."""
        try:
            while True:
                stop_if_cancelled()
                mail = self.m.mailbox.next_queued(recipient)
                if elsewhere(self.m.config, recipient) or (
                    mail is not None and mail.recipient_pane == REMOTE_PANE
                ):
                    await self.carrier.lane(recipient)
                    return
                if mail is None:
                    return
                driver = await self.driver(mail.recipient, mail.recipient_pane)
                if driver is None:
                    self._dead_letters(
                        recipient, f"receiver {recipient} ({mail.recipient_pane}) is gone"
                    )
                    return
                obs = await wait_idle(driver, self._time_left(mail))
                if obs.state is AgentState.EXITED:
                    tail = " | ".join(obs.snap.tail(3))
                    self._dead_letters(recipient, f"receiver {recipient} exited: {tail}")
                    return
                if obs.state is not AgentState.READY:
                    continue  # busy: the message waits; expiry is the main loop's
                gate = self.gate if recipient in self.owned else None
                if gate is not None and not await gate.admit(recipient, None):
                    # Held back by the fleet's budget: the message stays queued (its
                    # time to live runs on) and the lane asks again.
                    await asyncio.sleep(GATE_LOOK)
                    continue
                await self._deliver(driver, mail)
        except PolitermError as exc:
            self.say(f"postman: lane {recipient} stopped: {exc}")

    async def _deliver(self, driver: AgentDriver, queued: Mail) -> None:
        """Claim and type ``queued`` if its receiver is still idle, then follow its turn."""
        readonly = queued.kind is MailKind.REQUEST and queued.capability.value == "readonly"
        base = driver.policy
        try:
            async with driver.typing:
                # The router's step may have typed while this lane waited: look again; and
                # a prompt it handed the agent in a block's commit, not typed yet, goes first.
                if (await driver.observe()).state is not AgentState.READY or self._handed(driver):
                    return
                mail = self.m.change(queued, MailState.DELIVERING, count_attempt=True)
                if mail is None:
                    return
                if readonly:
                    driver.policy = readonly_policy()
                result = await driver.deliver(
                    self.m.request_text(mail), serves=_serves(mail), nonce=mail.id
                )
                if not result.got_in and result.outcome is not Outcome.AGENT_EXITED:
                    await driver.clear_input()
            # Submitted and asked about (an approval question at once) is delivered too, as
            # its journal row says: the receiver has the prompt, and a retry would type it
            # twice. Its turn is followed like any other (the question answered by policy).
            if result.got_in:
                self.m.delivered(
                    mail, f"delivered to {mail.recipient_pane} ({result.rule or 'confirmed'})"
                )
                self.say(f"{mail.id} delivered to {mail.recipient} ({mail.recipient_pane})")
                over = "delivered"
                if mail.kind is MailKind.REQUEST:
                    over = await self._watch_turn(driver, mail)
                driver.end_turn(result.turn_id, over)
                return
            evidence = " | ".join(result.evidence)
            if result.outcome is Outcome.AGENT_EXITED:
                self._dead_letters(mail.recipient, f"receiver {mail.recipient} exited: {evidence}")
                return
            why = f"attempt {mail.attempts}: {result.outcome.value}: {evidence}"
            if self.m.not_delivered(mail, why) is MailState.DEAD:
                self.say(f"{mail.id} dead after {mail.attempts} attempts")
        finally:
            driver.policy = base

    def _handed(self, driver: AgentDriver) -> bool:
        """Whether the router here handed ``driver``'s agent a prompt it has not typed yet."""
        rows = self.m.store.journal_open(agent=driver.name, workflow=Workflow.LOOP)
        return driver.name in self.owned and any(r.state is JournalState.HANDED for r in rows)

    async def _watch_turn(self, driver: AgentDriver, mail: Mail) -> str:
        """Follow the receiver's turn to its end (approvals by the request's policy).

        A receiver waiting for a limit to reset is watched on (its driver resumes it at the
        reset), however long that takes: the message's time to live stands still meanwhile.
        Returns how the turn ended (for its row in the journal of turns).
        """
        while True:
            stop_if_cancelled()
            left = self._time_left(mail)
            obs = await wait_idle(driver, left, settle=self.settle)
            if obs.state is AgentState.EXITED:
                tail = " | ".join(obs.snap.tail(3))
                self._dead_letters(mail.recipient, f"receiver {mail.recipient} exited: {tail}")
                return "exited"
            now = self.m.mailbox.get(mail.id)
            if obs.state is AgentState.READY:
                return "idle"
            if now is None or now.state.is_final:
                return "ended"
            if not self._paused(now) and now.expires <= time.time():
                return "expired"  # the main loop expires it
            mail = now

    def _paused(self, mail: Mail) -> bool:
        """Whether the receiver waits for a usage limit to reset (its clock stands still)."""
        return stored_limit(self.m.store, mail.recipient) is not None

    def _time_left(self, mail: Mail) -> float:
        """How long a lane may wait on ``mail``'s receiver before it looks at the queue again."""
        fresh = self.m.mailbox.get(mail.id) or mail
        if self._paused(fresh):
            return _LANE_LOOK
        return max(0.0, min(_LANE_LOOK, fresh.expires - time.time()))

    # --- recovery -------------------------------------------------------------------------

    async def settle_in_flight(self) -> None:
        """Settle what a killed postman left: the journal of turns' open rows (module doc)."""
        for row in self.m.store.journal_open(workflow=Workflow.MESSAGING):
            mail = self.m.mailbox.get(str(row.serves.key[0]))
            if mail is None or mail.state.is_final:
                abandon(self.m.store, row, "its message ended")
                continue
            driver = await self.driver(mail.recipient, mail.recipient_pane)
            if driver is None:
                self._dead_letters(mail.recipient, f"receiver {mail.recipient} is gone")
                abandon(self.m.store, row, "its receiver is gone")
                continue
            obs = await driver.observe()
            if obs.state is AgentState.EXITED:
                self._dead_letters(mail.recipient, f"receiver {mail.recipient} exited")
                driver.end_turn(row.id, "exited")
                continue
            over = "settled"  # its turn is not followed after a restart; its row says so
            if mail.state is MailState.DELIVERING:
                async with driver.typing:
                    over = await self._settle(driver, mail, row, obs.snap)
            driver.end_turn(row.id, over)
            self.say(f"{mail.id} settled: {self.m.mailbox.require(mail.id).state.value}")
        # The driver writes a prompt's row before it types: one claimed without a row was
        # never typed.
        for mail in self.m.mailbox.select(states=[MailState.DELIVERING]):
            if mail.recipient_pane == REMOTE_PANE or mail.origin is not None:
                continue  # typed by a fleet node, under its work's lease: not ours to settle
            self.m.change(mail, MailState.QUEUED, reason="settled after a restart: never typed")

    async def _settle(
        self, driver: AgentDriver, mail: Mail, row: JournalRow, snap: Snapshot
    ) -> str:
        """A DELIVERING mail's fate from the receiver itself (:func:`resume`), in a word."""
        text = self.m.request_text(mail)
        found = await resume(driver, row, text, snap)
        if found.resumed == "pasted":
            result = await driver.deliver(
                text, already_pasted=True, serves=_serves(mail), nonce=mail.id
            )
            if result.ok:
                why = "settled after a restart: submitted the text left in the box"
                self.m.delivered(mail, why)
                return "settled"
        elif found.resumed == "delivered":
            said = f": {found.evidence[0]}" if found.sources else ""
            self.m.delivered(mail, f"settled after a restart: {found.rule}{said}")
            return "settled"
        await driver.clear_input()
        self.m.change(mail, MailState.QUEUED, reason="settled after a restart: it never arrived")
        return "never arrived"

    # --- answers typed by hand ------------------------------------------------------------

    async def _scan_senders(self) -> list[AgentDriver]:
        """Look for response lines in the panes of senders waiting for answers."""
        waiting: dict[str, list[Mail]] = {}
        for mail in self.m.mailbox.select(
            states=[MailState.DELIVERING, MailState.DELIVERED], kind=MailKind.REQUEST
        ):
            if mail.sender_pane:
                waiting.setdefault(mail.sender_pane, []).append(mail)
        drivers: list[AgentDriver] = []
        for pane_id, mails in waiting.items():
            driver = await self.driver(mails[0].sender, pane_id)
            if driver is None:
                continue
            drivers.append(driver)
            snap = await driver.snapshot()
            if snap is None:
                continue
            for line in find_response_lines("\n".join(snap.lines)):
                if line not in self._seen_lines:
                    self._seen_lines.add(line)
                    self._take_line(line, mails)
        return drivers

    def _take_line(self, line: ResponseLine, mails: list[Mail]) -> None:
        try:
            path = self.m.dir.check(line.path)
        except UnsafeMessagePath as exc:
            self._refuse(line, str(exc))
            return
        named = None
        for mail_id in named_ids(path.name):
            found = self.m.mailbox.get(mail_id)
            if found is not None and found.kind is MailKind.REQUEST:
                named = found
                break
        verdict = judge(
            line,
            file_name=path.name,
            written=path.stat().st_mtime,
            waiting=mails,
            named=named,
            used_by=self.m.mailbox.answered_with(str(path)),
        )
        if verdict.take is Take.REFUSED:
            self._refuse(line, verdict.why)
            return
        if verdict.take is Take.KNOWN or verdict.mail is None:
            return  # the notification of an answer already recorded
        with contextlib.suppress(MessagingError):
            self.m.record_response(verdict.mail, path, notify=False)
            self.say(f"{verdict.mail.id} answered by hand from {line.pane}: {path}")

    def _refuse(self, line: ResponseLine, why: str) -> None:
        self.m.store.add_event("mail.rejected", detail=f"response line from {line.pane}: {why}")
        self.say(f"rejected a response line from {line.pane}: {why}")


__all__ = ["READONLY_COMMANDS", "Postman", "PostmanLock", "readonly_policy"]
