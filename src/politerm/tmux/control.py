"""A persistent asyncio client for tmux control mode (``tmux -C``).

One connection serves every capture, paste and key of a session: commands are written as
lines, replies come back framed by ``%begin``/``%end`` (or ``%error``) with the same
command number, and pane output arrives unasked as ``%output`` notifications. libtmux has
no asyncio control-mode client, so this one is ours.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import time
import typing as t

from politerm._internal.aio import finish, listen
from politerm.errors import (
    ControlModeError,
    PaneNotFound,
    ServerNotRunning,
    SessionNotFound,
    TmuxCommandError,
    TmuxLookupError,
)
from politerm.tmux._escape import command_line, decode_output
from politerm.tmux._feeds import OutputFeeds
from politerm.tmux._wire import (
    _DEAD_SUB,
    _GUARD,
    _PANE_MISSING,
    _SERVER_GONE,
    _SESSION_MISSING,
    SAME_NAME,
    Notification,
    NotificationCallback,
    OutputCallback,
    _decoded,
    _first,
    _Lines,
    _Pending,
    _target_of,
    death_hook,
)

if t.TYPE_CHECKING:
    from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

# Bytes asked for per read of tmux's replies and notifications.
_READ_SIZE = 1 << 16

_WATCH_DEAD = f"refresh-client -B '{_DEAD_SUB}:%*:#{{pane_dead}}'"

__all__ = ["ControlClient", "Notification", "NotificationCallback", "OutputCallback"]


class ControlClient:
    """An asyncio control-mode connection to one session of a private tmux server.

    Parameters
    ----------
    socket_name
        The private server's socket name (``tmux -L``).
    session
        The session to attach to; it must exist (see :class:`politerm.tmux.server.TmuxServer`).
    tmux
        The tmux binary.
    reconnect
        Re-attach automatically when the connection drops while the server still runs.

    Notes
    -----
    Start it with :meth:`start` (or ``async with``). Commands sent while the connection is
    being re-established wait for it, within their own timeout.
    """

    def __init__(
        self,
        socket_name: str,
        session: str,
        *,
        tmux: str = "tmux",
        reconnect: bool = True,
        reconnect_attempts: int = 5,
    ) -> None:
        self.socket_name = socket_name
        self.session = session
        self.tmux = tmux
        self.reconnect = reconnect
        self.reconnect_attempts = reconnect_attempts
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._write_lock = asyncio.Lock()
        self._connected = asyncio.Event()
        self._attached = asyncio.Event()  # tmux said %session-changed: the attach is done
        # Set together with _dead_reason, so waiters for a reconnect learn it will not come.
        self._dead = asyncio.Event()
        self._closing = False
        self._dead_reason: str | None = None
        self.feeds = OutputFeeds(self._want_output)
        """Every pane's output on this connection: events to wait on, subscriptions."""
        self._dead_seen: dict[str, str] = {}  # pane id -> last #{pane_dead} tmux reported
        self._listeners: list[NotificationCallback] = []
        self._reconnect_task: asyncio.Task[None] | None = None
        # quiet(): %output only while someone subscribed; _no_output is what tmux was told.
        self._quiet = False
        self._no_output = False
        self.connections = 0
        self.exit_reason: str | None = None

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> t.Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether the control connection is up right now."""
        return self._connected.is_set()

    async def start(self, timeout: float = 10.0) -> None:
        """Attach to the session in control mode.

        Raises
        ------
        ServerNotRunning
            When the server is not running.
        SessionNotFound
            When the session does not exist.
        ControlModeError
            When tmux did not accept the connection within ``timeout``.
        """
        self._closing = False
        self._dead_reason = None
        self._dead.clear()
        await self._spawn(timeout)

    async def _check_session(self, env: dict[str, str]) -> None:
        # Control mode with a missing target still starts (it just has nothing to show),
        # so the server and session are checked first with one short-lived process.
        proc = await asyncio.create_subprocess_exec(
            self.tmux,
            "-L",
            self.socket_name,
            "has-session",
            "-t",
            f"={self.session}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancel that
            # comes with its result, and the caller's loop would never stop.
            async with asyncio.timeout(5):
                _, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            msg = f"tmux has-session did not answer within 5s (socket {self.socket_name!r})"
            raise TmuxLookupError(msg) from None
        if proc.returncode == 0:
            return
        detail = err.decode(errors="replace").strip()
        if _SESSION_MISSING.search(detail):
            msg = f"no tmux session {self.session!r} on socket {self.socket_name!r}"
            raise SessionNotFound(msg)
        msg = f"no tmux server on socket {self.socket_name!r} ({detail or 'not running'})"
        raise ServerNotRunning(msg)

    async def _spawn(self, timeout: float) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        await self._check_session(env)
        self._proc = await asyncio.create_subprocess_exec(
            self.tmux,
            "-L",
            self.socket_name,
            "-C",
            "attach-session",
            "-t",
            f"={self.session}",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            limit=1 << 24,
        )
        self._attached.clear()
        self._reader = asyncio.create_task(self._read_loop(self._proc), name="tmux-control-reader")
        # The round trip of a first command proves commands flow; it may run before the
        # attach itself (tmux reads our stdin before the attach command), and then a
        # client-scoped command fails with "no current client": wait for the attach too.
        try:
            async with asyncio.timeout(timeout):
                fut = await self._send_now("display-message -p '#{session_name}'")
                await fut
                await self._await_attach(self._reader)
        except TimeoutError as exc:
            await self._kill_proc()
            msg = (
                f"tmux control mode did not answer within {timeout:g}s "
                f"(socket {self.socket_name!r}, session {self.session!r})"
            )
            raise ControlModeError(msg) from exc
        except ControlModeError:
            reason = self.exit_reason or ""
            stderr = ""
            if self._proc is not None and self._proc.stderr is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1):
                        stderr = (await self._proc.stderr.read()).decode(errors="replace")
            detail = (stderr or reason).strip()
            await self._kill_proc()
            if _SERVER_GONE.search(detail) or not detail:
                why = detail or "connection refused"
                msg = f"no tmux server on socket {self.socket_name!r} ({why})"
                raise ServerNotRunning(msg) from None
            if _SESSION_MISSING.search(detail):
                msg = f"no tmux session {self.session!r} on socket {self.socket_name!r}"
                raise SessionNotFound(msg) from None
            msg = f"tmux control mode refused: {detail}"
            raise ControlModeError(msg) from None
        self.connections += 1
        self._connected.set()
        # A pane whose program dies prints nothing more, so no %output would wake its
        # watcher: a driver's connection watches #{pane_dead} of every pane and gets
        # %subscription-changed. tmux formats that once a second per pane and client, so the
        # views' connections (quiet) do not; they hear a death as %window-renamed, from the
        # pane-died hook (death_hook: set by whoever connects, a server a test or the user
        # started lacks our config) and, for a death the hook missed, from the driver's
        # connection (see _on_notification).
        with contextlib.suppress(TmuxCommandError, ControlModeError, TmuxLookupError):
            hook = death_hook(shutil.which(self.tmux) or self.tmux)
            await self._answer(command_line(("set-hook", "-g", "pane-died", hook)))
            if not self._quiet:
                await self._answer(_WATCH_DEAD)
        # A new connection starts with output on: tell it again what this client wants.
        self._no_output = False
        if self._quiet and self.feeds.subscribers == 0:
            with contextlib.suppress(TmuxCommandError, ControlModeError, TmuxLookupError):
                await self._set_no_output(True)
        log.debug("control client attached to %s/%s", self.socket_name, self.session)

    async def _await_attach(self, reader: asyncio.Task[None]) -> None:
        attached = asyncio.ensure_future(self._attached.wait())
        await asyncio.wait([attached, reader], return_when=asyncio.FIRST_COMPLETED)
        attached.cancel()
        if not self._attached.is_set():
            msg = "tmux control mode ended before the attach"
            raise ControlModeError(msg)

    async def close(self) -> None:
        """Detach and stop; pending commands fail with :class:`ControlModeError`."""
        self._closing = True
        if self._reconnect_task is not None:
            await finish(self._reconnect_task)
        proc = self._proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            # An empty line asks tmux to detach the control client cleanly (bounded: a
            # client that reads no more, its pipe full, is killed below instead).
            with contextlib.suppress(TimeoutError, Exception):
                async with asyncio.timeout(2):
                    proc.stdin.write(b"\n")
                    await proc.stdin.drain()
                    proc.stdin.close()
                    await proc.wait()
        await self._kill_proc()
        if self._reader is not None:
            await finish(self._reader)
        self._fail_pending("control client closed")
        self._connected.clear()

    async def _kill_proc(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await proc.wait()

    # --- commands -------------------------------------------------------------------------

    async def cmd(self, *args: str, timeout: float = 10.0) -> list[str]:
        """Run one tmux command over the connection and return its output lines.

        Parameters
        ----------
        *args
            The command and its arguments, unquoted (quoting is done here).
        timeout
            Upper bound on the whole round trip, including waiting for a reconnect.

        Raises
        ------
        PaneNotFound
            The target pane does not exist.
        TmuxCommandError
            tmux answered ``%error``.
        TmuxLookupError
            No answer within ``timeout``.
        ServerNotRunning
            The server is gone.
        """
        return await self.raw(command_line(args), timeout=timeout)

    async def raw(self, line: str, *, timeout: float = 10.0) -> list[str]:
        """Send an already-quoted command line; see :meth:`cmd`."""
        return (await self._raw_many((line,), timeout=timeout))[0]

    async def cmds(self, *commands: Sequence[str], timeout: float = 10.0) -> list[list[str]]:
        """Run several commands back to back: written at once, answered in order.

        One round trip instead of one per command (tmux runs them in the order written).
        Raises the first command's error like :meth:`cmd`; the later ones still ran.
        """
        return await self._raw_many([command_line(list(c)) for c in commands], timeout=timeout)

    async def _raw_many(self, lines: Sequence[str], *, timeout: float) -> list[list[str]]:
        deadline = time.monotonic() + timeout
        line = lines[0]
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self._dead_reason is not None:
                        raise ServerNotRunning(self._dead_reason)
                    if not self._connected.is_set():
                        await _first(self._connected, self._dead)
                        continue
                    try:
                        futures = await self._send_lines(lines)
                        results: list[list[str]] = []
                        first_error: TmuxCommandError | None = None
                        for fut in futures:
                            try:
                                results.append(await fut)
                            except TmuxCommandError as exc:
                                first_error = first_error or exc
                                results.append([])
                        if first_error is not None:
                            line = first_error.command
                            raise first_error
                    except ControlModeError:
                        # Connection dropped under us: wait for the reconnect and resend.
                        # Only idempotent lookups would be safe to resend blindly, so the
                        # caller is told instead when the command may have run.
                        if self._dead_reason is not None:
                            raise ServerNotRunning(self._dead_reason) from None
                        raise
                    return results
        except TimeoutError as exc:
            waited = timeout - max(0.0, deadline - time.monotonic())
            msg = f"tmux did not answer {line.split(' ', 1)[0]!r} within {waited:.1f}s"
            raise TmuxLookupError(msg) from exc
        except TmuxCommandError as exc:
            detail = "; ".join(exc.lines)
            m = _PANE_MISSING.search(detail)
            if m:
                raise PaneNotFound(m.group(1) or _target_of(line), detail) from None
            if _SESSION_MISSING.search(detail):
                raise SessionNotFound(detail) from None
            raise

    async def _send_now(self, line: str) -> asyncio.Future[list[str]]:
        return (await self._send_lines((line,)))[0]

    async def _answer(self, line: str, timeout: float = 10.0) -> list[str]:
        """Send ``line`` now (also while attaching) and wait, bounded, for tmux's answer.

        A reply that comes after the timeout still finds its place in the queue of pending
        commands, so the replies after it stay matched to their commands.
        """
        try:
            async with asyncio.timeout(timeout):
                return await (await self._send_now(line))
        except TimeoutError:
            msg = f"tmux did not answer {line.split(' ', 1)[0]!r} within {timeout:g}s"
            raise TmuxLookupError(msg) from None

    async def _send_lines(self, lines: Sequence[str]) -> list[asyncio.Future[list[str]]]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            msg = "tmux control connection is down"
            raise ControlModeError(msg)
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[list[str]]] = []
        async with self._write_lock:
            # Append and write under one lock so reply order matches send order.
            now = time.monotonic()
            for line in lines:
                fut: asyncio.Future[list[str]] = loop.create_future()
                self._pending.append(_Pending(line, fut, now))
                futures.append(fut)
            try:
                proc.stdin.write(b"".join(line.encode() + b"\n" for line in lines))
                await proc.stdin.drain()
            except (ConnectionError, BrokenPipeError, RuntimeError) as exc:
                msg = f"tmux control connection is down: {exc}"
                raise ControlModeError(msg) from exc
        return futures

    # --- reading --------------------------------------------------------------------------

    async def _read_loop(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        block: list[bytes] | None = None
        block_num = b""
        block_ours = False
        lines = _Lines()
        try:
            while True:
                chunk = await proc.stdout.read(_READ_SIZE)
                for line in lines.feed(chunk):
                    if block is not None:
                        m = _GUARD.match(line) if line.startswith(b"%") else None
                        if m and m.group(1) in (b"end", b"error") and m.group(3) == block_num:
                            if block_ours:
                                self._resolve(_decoded(block), error=m.group(1) == b"error")
                            elif m.group(1) == b"error":
                                self.exit_reason = "; ".join(_decoded(block)) or "attach failed"
                            block = None
                            continue
                        block.append(line)
                        continue
                    if line.startswith(b"%output "):
                        self._on_output(line)
                        continue
                    m = _GUARD.match(line)
                    if m and m.group(1) == b"begin":
                        block = []
                        block_num = m.group(3)
                        # flags=1 marks a reply to a command this client sent; 0 is tmux's
                        # own reply to the attach-session given on the command line.
                        block_ours = m.group(4) == b"1"
                        continue
                    if line.startswith(b"%"):
                        self._on_notification(line)
                if not chunk:
                    break
        except asyncio.CancelledError:
            raise
        except Exception:  # a reader crash must not leave waiters hanging
            log.exception("tmux control reader failed")
        finally:
            self._on_disconnect(proc)

    def _resolve(self, lines: list[str], *, error: bool) -> None:
        if not self._pending:
            log.warning("tmux reply with no pending command: %r", lines[:3])
            return
        pending = self._pending.popleft()
        if pending.future.done():
            return
        if error:
            pending.future.set_exception(TmuxCommandError(pending.line, lines))
        else:
            pending.future.set_result(lines)

    def _on_output(self, line: bytes) -> None:
        # "%output %12 <escaped bytes>"
        try:
            _, pane_id, payload = line.split(b" ", 2)
        except ValueError:
            _, pane_id = line.split(b" ", 1)
            payload = b""
        self.feeds.output(pane_id.decode(), decode_output(payload))

    def _on_notification(self, line: bytes) -> None:
        parts = line.decode("utf-8", errors="replace").split(" ")
        note = Notification(parts[0][1:], tuple(parts[1:]))
        if note.name == "session-changed":
            self._attached.set()
        elif note.name == "exit":
            self.exit_reason = " ".join(note.args) or "exit"
        elif note.name == "subscription-changed" and note.args[:1] == (_DEAD_SUB,):
            pane = next((a for a in note.args[1:] if a.startswith("%")), None)
            dead = note.args[-1] if note.args else ""
            if pane is not None:
                before = self._dead_seen.get(pane)
                self._dead_seen[pane] = dead
                # tmux reports every pane once when it first sees it (alive: "0"): only a
                # change, or a first report of a dead pane, is news for its watcher.
                if before != dead and (before is not None or dead == "1"):
                    self.feeds.wake(pane)
                if dead == "1" and before != "1":
                    # tmux's pane-died hook does not always run (seen with tmux 3.3a): the
                    # views hear each death this connection sees from it too.
                    self._queue_now(command_line(("rename-window", "-t", pane, SAME_NAME)))
        elif note.name in ("window-renamed", "unlinked-window-renamed"):
            # A pane died or was respawned (see death_hook), which one only a look tells;
            # that is rare, so every watcher re-checks its pane.
            self.feeds.wake_all()
        elif note.name == "pane-mode-changed" and note.args:
            # A person scrolling (copy mode) or leaving it: the pane's watcher looks again.
            self.feeds.wake(note.args[0])
        elif note.name in ("window-close", "unlinked-window-close", "session-changed"):
            # Panes may be gone or moved: every watcher re-checks instead of sleeping on.
            self.feeds.wake_all()
        for cb in list(self._listeners):
            try:
                cb(note)
            except Exception:
                log.exception("notification listener failed for %s", note.name)

    def _on_disconnect(self, proc: asyncio.subprocess.Process) -> None:
        if proc is not self._proc:
            return
        self._connected.clear()
        self._fail_pending(f"tmux control connection dropped ({self.exit_reason or 'eof'})")
        # Wake every waiter so it re-checks the pane instead of sleeping to its timeout.
        self.feeds.wake_all()
        if not self._closing and self.reconnect:
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect_loop())
        elif not self._closing:
            self._set_dead("tmux control connection dropped")

    def _fail_pending(self, why: str) -> None:
        while self._pending:
            p = self._pending.popleft()
            if not p.future.done():
                p.future.set_exception(ControlModeError(why))

    async def _reconnect_loop(self) -> None:
        delay = 0.05
        last: Exception | None = None
        for _ in range(self.reconnect_attempts):
            await asyncio.sleep(delay)
            if self._closing:
                return
            try:
                self.exit_reason = None
                await self._spawn(timeout=5.0)
            except (ServerNotRunning, SessionNotFound) as exc:
                last = exc
                break
            except ControlModeError as exc:
                last = exc
                delay = min(delay * 2, 1.0)
                continue
            log.info("tmux control connection re-established")
            return
        self._set_dead(
            f"tmux server on socket {self.socket_name!r} is gone (session {self.session!r}): {last}"
        )
        self.feeds.wake_all()

    def _set_dead(self, reason: str) -> None:
        self._dead_reason = reason
        self._dead.set()

    # --- quiet and notifications -----------------------------------------------------------

    async def respawned(self, pane_id: str) -> None:
        """Tell the views that ``pane_id`` lives again; look at its next death afresh.

        tmux reports a subscribed value only when it changed since its last look, once a
        second: a program that dies within that second of its respawn would go unreported.
        Subscribing again starts tmux's looks over (every pane reported once more).
        """
        self._dead_seen.pop(pane_id, None)
        lines = [command_line(("rename-window", "-t", pane_id, SAME_NAME))]
        if not self._quiet:
            lines.append(_WATCH_DEAD)
        await self._raw_many(lines, timeout=10.0)

    async def quiet(self) -> None:
        """Have tmux send no pane output to this connection while nobody subscribed to one.

        tmux writes every pane's output to every control client attached to the session;
        a reader that only looks at the session's layout and deaths (the views) need not
        receive it, nor make the server write it. Notifications still come; a
        subscription (:attr:`feeds`) turns output on for as long as it lasts. Kept over reconnects.
        Needs tmux's ``no-output`` client flag (3.2).
        """
        if not self._quiet:
            self._quiet = True
            # Deaths come as %window-renamed (see start): no pane_dead watch for the views.
            with contextlib.suppress(TmuxCommandError):
                await self._answer(f"refresh-client -B '{_DEAD_SUB}'")
        if self.feeds.subscribers == 0 and not self._no_output:
            await self._set_no_output(True)

    @property
    def output_off(self) -> bool:
        """Whether tmux was told to send this connection no pane output (:meth:`quiet`)."""
        return self._no_output

    async def _set_no_output(self, off: bool) -> None:
        self._no_output = off
        await self._answer(self._no_output_line(off))

    @staticmethod
    def _no_output_line(off: bool) -> str:
        return f"refresh-client -f {'no-output' if off else '!no-output'}"

    def _want_output(self) -> None:
        """Turn a quiet client's output on or off to match its subscribers, without waiting.

        Called from synchronous code (a subscription and its removal): the line is queued
        now, so it reaches tmux before any command sent after it; its answer is not awaited.
        """
        off = self._quiet and self.feeds.subscribers == 0
        if off == self._no_output or not self._connected.is_set():
            return  # a reconnect applies the wanted state itself
        if self._queue_now(self._no_output_line(off)):
            self._no_output = off

    def _queue_now(self, line: str) -> bool:
        """Queue ``line`` at once from synchronous code; its answer is only logged.

        False when the connection cannot take it now.
        """
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return False
        fut: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_log_failure)
        # Appended and written with no await in between: a holder of the write lock has
        # already written its own lines, so replies still come in the order of _pending.
        self._pending.append(_Pending(line, fut, time.monotonic()))
        try:
            proc.stdin.write(line.encode() + b"\n")
        except (ConnectionError, BrokenPipeError, RuntimeError) as exc:
            log.debug("could not ask tmux for %s: %s", line, exc)
        return True

    def on_notification(self, callback: NotificationCallback) -> Callable[[], None]:
        """Call ``callback`` with every notification (``%exit``, ``%window-close``, ...)."""
        return listen(self._listeners, callback)

    @property
    def dead_reason(self) -> str | None:
        """Why the connection is gone for good, or None while it is usable."""
        return self._dead_reason


def _log_failure(fut: asyncio.Future[list[str]]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.debug("tmux refused a command sent unawaited: %s", fut.exception())
