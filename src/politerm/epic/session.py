"""One scoped agent session: start, deliver the prompt, watch for the fenced report, stop.

The agent's raw output goes, as it arrives, to the redacted transcript and to the
:class:`~politerm.protocol.report.ReportParser`; a report error sentinel stops the session at
once (the agent is killed, not waited for). A soft stop delivers the operator note and gives
the agent a grace period to report; an abort kills it. Works on any :class:`SessionTerminal`:
a PTY (:class:`~politerm.pty.PtyTerminal`) or a tmux pane (:class:`TmuxSessionTerminal`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import datetime
import os
import time
import typing as t

from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Outcome
from politerm.driver.limits import LimitPolicy, PausedDeadline
from politerm.errors import AgentExited, AgentTimeout, PaneNotFound, ReportError, TmuxError
from politerm.protocol.parser import clean_line
from politerm.protocol.report import Report, ReportParser, ReportStatus
from politerm.pty.runner import PtyTerminal
from politerm.redact import LineRedactor
from politerm.store.db import FILE_MODE, ensure_private_dir
from politerm.store.epics import SessionStatus
from politerm.tmux.pane import Pane

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Callable

    from politerm.agents.approval import ApprovalPolicy
    from politerm.agents.profile import AgentProfile
    from politerm.driver.receipts import Receipts
    from politerm.redact import Redactor
    from politerm.store import RunStore
    from politerm.terminal import Snapshot

#: After the closing fence, output is read until it is quiet this long (a legacy footer).
SETTLE_QUIET = 0.3
SETTLE_MAX = 2.0
_TICK = 0.25
#: A transcript line without a newline is written anyway once it is this long.
MAX_LINE = 65536


class SessionTerminal(t.Protocol):
    """A :class:`~politerm.terminal.Terminal` a session can also subscribe to and kill."""

    @property
    def name(self) -> str:
        """Display name."""
        ...

    async def snapshot(self) -> Snapshot:
        """The rendered screen now."""
        ...

    async def paste(self, data: bytes, *, bracketed: bool = True, keep_lf: bool = True) -> None:
        """Deliver text as a paste."""
        ...

    async def send_keys(self, *keys: str) -> None:
        """Press named keys."""
        ...

    async def prepare_input(self) -> None:
        """Make sure typed input reaches the program."""
        ...

    def output_event(self) -> asyncio.Event:
        """An event set by the program's next output."""
        ...

    def subscribe(self, callback: Callable[[bytes], None]) -> Callable[[], None]:
        """Raw output chunks to ``callback``; returns an unsubscribe."""
        ...

    async def alive(self) -> bool:
        """Whether the program still runs."""
        ...

    @property
    def exit_status(self) -> int | None:
        """The exit status once known."""
        ...

    async def kill(self, *, grace: float = 3.0) -> None:
        """Stop the program and its process tree."""
        ...


class TmuxSessionTerminal:
    """A tmux :class:`~politerm.tmux.pane.Pane` seen as a :class:`SessionTerminal`."""

    def __init__(self, pane: Pane) -> None:
        self.pane = pane
        self._exit_status: int | None = None

    @property
    def name(self) -> str:
        """The pane id."""
        return self.pane.name

    async def snapshot(self) -> Snapshot:
        """The pane's screen."""
        return await self.pane.snapshot()

    async def paste(self, data: bytes, *, bracketed: bool = True, keep_lf: bool = True) -> None:
        """Paste through a tmux buffer."""
        await self.pane.paste(data, bracketed=bracketed, keep_lf=keep_lf)

    async def send_keys(self, *keys: str) -> None:
        """``send-keys``."""
        await self.pane.send_keys(*keys)

    async def prepare_input(self) -> None:
        """Leave copy mode."""
        await self.pane.prepare_input()

    def output_event(self) -> asyncio.Event:
        """The pane's next ``%output``."""
        return self.pane.output_event()

    def subscribe(self, callback: Callable[[bytes], None]) -> Callable[[], None]:
        """The pane's decoded ``%output`` bytes."""
        return self.pane.client.subscribe(self.pane.pane_id, lambda _pane, data: callback(data))

    async def alive(self) -> bool:
        """False once the pane is dead or gone."""
        try:
            info = await self.pane.info()
        except (PaneNotFound, TmuxError):
            return False
        if info.dead:
            self._exit_status = info.dead_status
        return not info.dead

    @property
    def exit_status(self) -> int | None:
        """The dead pane's status."""
        return self._exit_status

    async def kill(self, *, grace: float = 3.0) -> None:
        """Kill the pane and its process tree."""
        await self.pane.kill(grace=grace)


class StopControl:
    """Operator stop requests: the first is a soft stop, the second (or :meth:`abort`) aborts."""

    def __init__(self) -> None:
        self.level = 0
        self._listeners: list[Callable[[], None]] = []

    @property
    def soft(self) -> bool:
        """A soft stop (or more) was asked for."""
        return self.level >= 1

    @property
    def aborted(self) -> bool:
        """An abort was asked for."""
        return self.level >= 2

    def request(self) -> None:
        """One Ctrl-C: soft stop the first time, abort the second."""
        self.level = min(self.level + 1, 2)
        self._notify()

    def abort(self) -> None:
        """Abort at once (SIGTERM)."""
        self.level = 2
        self._notify()

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every request; returns a remover."""
        self._listeners.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return remove

    def _notify(self) -> None:
        for cb in list(self._listeners):
            cb()


class TranscriptWriter:
    """Appends a session's output to a file (mode 0600) as clean text lines, redacted.

    Escape sequences are dropped and carriage-return overdraws resolved
    (:func:`~politerm.protocol.parser.clean_line`); each complete line is redacted before it
    is written, and private key blocks are held back until they can be redacted whole.
    """

    def __init__(self, path: pathlib.Path, redactor: Redactor, *, header: str = "") -> None:
        self.path = path
        ensure_private_dir(path.parent)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        os.fchmod(self._fd, FILE_MODE)
        self._lines = LineRedactor(redactor)
        self._tail = ""
        if header:
            self._write([header])

    @property
    def redactions(self) -> int:
        """How many secrets were replaced so far."""
        return self._lines.count

    def write(self, text: str) -> None:
        """Take the next chunk of output."""
        *complete, self._tail = (self._tail + text).split("\n")
        if len(self._tail) > MAX_LINE:
            complete.append(self._tail)
            self._tail = ""
        out: list[str] = []
        for line in complete:
            out += self._lines.push(clean_line(line))
        self._write(out)

    def _write(self, lines: list[str]) -> None:
        if self._fd is None or not lines:
            return
        data = ("\n".join(lines) + "\n").encode("utf-8", "replace")
        while data:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        """Write what is left (redacted) and close the file."""
        if self._fd is None:
            return
        out = self._lines.push(clean_line(self._tail)) if self._tail.strip() else []
        self._tail = ""
        self._write(out + self._lines.flush())
        os.close(self._fd)
        self._fd = None


@dataclasses.dataclass(frozen=True)
class SessionOutcome:
    """How one session ended."""

    status: SessionStatus
    report: Report | None
    error: str | None
    started: float
    finished: float
    exit_status: int | None = None
    soft_stopped: bool = False


async def run_session(
    term: SessionTerminal,
    *,
    profile: AgentProfile,
    prompt: str,
    session_id: str,
    timeout: float,
    grace: float,
    ready_timeout: float,
    stop: StopControl,
    transcript: TranscriptWriter | None = None,
    on_state: Callable[[str], None] | None = None,
    note: str = "",
    store: RunStore | None = None,
    policy: ApprovalPolicy | None = None,
    approval_key: str | None = None,
    receipts: Receipts | None = None,
    limits: LimitPolicy | None = None,
) -> SessionOutcome:
    """Run one session on an already started ``term``; the agent is stopped at the end.

    Parameters
    ----------
    term
        The agent's terminal (just spawned).
    profile
        How to read and type into the agent.
    prompt
        The layered prompt (asks for a ``poli:<session_id>`` report).
    session_id
        The UUID the report must carry.
    timeout
        Seconds from start until the session is given up without a report.
    grace
        Seconds a soft stop leaves for the report before the agent is killed.
    ready_timeout
        Seconds the agent may take to become ready for the prompt.
    stop
        Operator stop requests (Ctrl-C, signals).
    transcript
        Where the output goes, redacted.
    on_state
        Told short state words for a status line.
    note
        The operator note a soft stop delivers.
    receipts
        The agent's hook receipts, when its launch installed hooks.
    store, policy, approval_key
        Where approval questions and events go, the approval policy, and the name ``poli
        approve`` answers this session's questions by (default ``epic.<session id>``).
    limits
        What to do when the agent hits a usage limit (``[limits]``); the session's
        ``timeout`` stands still while it waits for the reset.

    Returns
    -------
    SessionOutcome
        Never raises for an agent that misbehaves; the status and error say what happened.
    """
    say = on_state or (lambda _s: None)
    started = time.time()
    key = approval_key or f"epic.{session_id[:8]}"
    base = term.pane if isinstance(term, TmuxSessionTerminal) else term
    if not isinstance(base, (Pane, PtyTerminal)):
        msg = f"an epic session runs on a tmux pane or a PTY, not {type(term).__name__}"
        raise TypeError(msg)
    driver = AgentDriver.attach(
        key, profile, base, store=store, policy=policy, receipts=receipts, limits=limits
    )
    parser = ReportParser(session_id)
    signals: list[Report | ReportError] = []
    wake = asyncio.Event()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def on_output(data: bytes) -> None:
        text = decoder.decode(data)
        if transcript is not None:
            transcript.write(text)
        signals.extend(parser.feed(text))
        wake.set()

    unsubscribe = term.subscribe(on_output)
    remove_listener = stop.listen(wake.set)
    soft_sent = False

    def outcome(
        status: SessionStatus, report: Report | None = None, error: str | None = None
    ) -> SessionOutcome:
        return SessionOutcome(
            status, report, error, started, time.time(), term.exit_status, soft_sent
        )

    try:
        say("starting")
        try:
            await _until_stopped(_ready(driver, ready_timeout), stop)
        except (AgentExited, AgentTimeout) as exc:
            return outcome(SessionStatus.ERROR, error=str(exc))
        if stop.aborted:
            return outcome(SessionStatus.ABORTED, error="aborted by the operator before the prompt")
        say("delivering")
        result = await driver.deliver(prompt)
        if not (result.ok or (result.outcome is Outcome.BLOCKED and result.submitted)):
            detail = " | ".join(result.evidence[-3:])
            if result.outcome is Outcome.AGENT_EXITED:
                await term.alive()
                return outcome(
                    SessionStatus.ERROR,
                    error=f"agent exited (status {term.exit_status}) before its report: {detail}",
                )
            return outcome(
                SessionStatus.ERROR,
                error=f"prompt not delivered ({result.outcome.value}: {result.rule}): {detail}",
            )
        say("working")
        # Waiting for a usage limit to reset does not count against the session.
        clock = PausedDeadline(time.monotonic() + timeout)
        grace_deadline: float | None = None
        idle = _Idle(profile.idle_after, profile.idle_nudges)
        while True:
            wake.clear()
            for signal in signals:
                if isinstance(signal, ReportError):
                    return outcome(SessionStatus.ERROR, error=f"bad report: {signal}")
                say("report received")
                await _settle(term)
                try:
                    report = parser.finish()
                except ReportError as exc:
                    return outcome(SessionStatus.ERROR, error=f"bad report: {exc}")
                status = (
                    SessionStatus.SUCCESS
                    if report.status is ReportStatus.SUCCESS
                    else SessionStatus.NEEDS_HELP
                )
                return outcome(status, report)
            if stop.aborted:
                return outcome(SessionStatus.ABORTED, error="aborted by the operator")
            if stop.soft and not soft_sent:
                soft_sent = True
                say("wrapping up")
                grace_deadline = time.monotonic() + grace
                await driver.deliver(note)
                continue
            if not await term.alive():
                decoder_tail = decoder.decode(b"", final=True)
                signals.extend(parser.feed(decoder_tail))
                if signals:
                    continue
                code = term.exit_status
                try:
                    report = parser.finish()
                except ReportError as exc:
                    return outcome(
                        SessionStatus.ERROR,
                        error=f"agent exited (status {code}) without a valid report: {exc}",
                    )
                ok = report.status is ReportStatus.SUCCESS
                return outcome(SessionStatus.SUCCESS if ok else SessionStatus.NEEDS_HELP, report)
            # Approval questions are answered by policy (or wait for `poli approve`); an
            # agent sitting ready without its report is nudged, then the session fails.
            obs = await driver.observe()
            now = time.monotonic()
            deadline = clock.look(obs.state, now)
            if grace_deadline is None and not signals:
                verdict = idle.look(obs.state is AgentState.READY, now)
                if verdict == "nudge":
                    await driver.deliver(nudge_text(session_id))
                    idle.nudged(time.monotonic())
                    continue
                if verdict == "fail":
                    return outcome(
                        SessionStatus.ERROR,
                        error=f"the agent went idle without its poli:{session_id} report "
                        f"(ready for {profile.idle_after:g}s after the prompt and after each of "
                        f"{idle.nudges} nudge(s)); last on its screen: "
                        + " | ".join(driver.last_words(3)),
                    )
            if grace_deadline is not None and now >= grace_deadline:
                return outcome(
                    SessionStatus.ABORTED,
                    error=f"soft stop: no report within the {grace:g}s grace period",
                )
            if now >= deadline:
                return outcome(SessionStatus.ERROR, error=f"no report within {timeout:g}s")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_TICK):
                    await wake.wait()
    finally:
        say("stopping")
        remove_listener()
        with contextlib.suppress(Exception):
            await term.kill(grace=2.0)
        unsubscribe()


async def _ready(driver: AgentDriver, timeout: float) -> None:
    await driver.wait_ready(timeout)


def nudge_text(session_id: str) -> str:
    """What an agent that went idle without its report is told."""
    return (
        f"If you are finished, print your report now: the fenced poli:{session_id} block "
        "(status, commit_msg, details). If not, finish and then print it."
    )


@dataclasses.dataclass
class _Idle:
    """How long the agent has sat ready without its report, and the nudges it got."""

    after: float
    max_nudges: int
    nudges: int = 0
    since: float | None = None

    def look(self, ready: bool, now: float) -> str:
        """``"nudge"``, ``"fail"`` or ``""`` (keep waiting)."""
        if not ready:
            self.since = None
            return ""
        if self.since is None:
            self.since = now
        if now - self.since < self.after:
            return ""
        return "nudge" if self.nudges < self.max_nudges else "fail"

    def nudged(self, now: float) -> None:
        self.nudges += 1
        self.since = None


async def _until_stopped(coro: t.Coroutine[t.Any, t.Any, None], stop: StopControl) -> None:
    """Run ``coro`` but give up (quietly) as soon as an abort is requested."""
    task = asyncio.ensure_future(coro)
    aborted = asyncio.Event()
    remove = stop.listen(lambda: aborted.set() if stop.aborted else None)
    waiter = asyncio.ensure_future(aborted.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
    finally:
        remove()
        for fut in (task, waiter):
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fut


async def _settle(term: SessionTerminal) -> None:
    """Read on until the output is quiet (a legacy footer may follow the fence)."""
    end = time.monotonic() + SETTLE_MAX
    while time.monotonic() < end:
        event = term.output_event()
        try:
            async with asyncio.timeout(SETTLE_QUIET):
                await event.wait()
        except TimeoutError:
            return


def transcript_header(session_id: str, item: str) -> str:
    """The line a transcript starts each session with."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"===== poli session {session_id} item {item} {now} ====="
