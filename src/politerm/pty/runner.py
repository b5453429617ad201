"""An agent CLI in a pseudo-terminal, with a rendered screen: the headless :class:`Terminal`.

:class:`PtyTerminal` spawns the program with :mod:`ptyprocess`, reads its output on the event
loop (``add_reader``, no thread), keeps a :mod:`pyte` screen of it, and implements the same
:class:`~politerm.terminal.Terminal` interface as a tmux pane, so profiles, detectors,
confirmed delivery and the parsers work on it unchanged. Raw output also goes to subscribers
(the live view, the transcript, the report parser).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import signal
import time
import typing as t

import ptyprocess
import pyte

from politerm._internal.aio import listen
from politerm._internal.proctree import kill_processes, process_tree
from politerm.errors import PtyError
from politerm.pty.liveview import LiveView
from politerm.terminal import Snapshot
from politerm.tmux.pane import check_key, sanitize_paste
from politerm.tmux.server import NOT_INHERITED

if t.TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

ByteCallback = t.Callable[[bytes], None]

READ_SIZE = 65536
#: Bytes written to the PTY per ``write()``; the program reads as it goes.
WRITE_CHUNK = 4096
_BRACKETED_ON = b"\x1b[?2004h"
_BRACKETED_OFF = b"\x1b[?2004l"
_ALT_ON = (b"\x1b[?1049h", b"\x1b[?1047h", b"\x1b[?47h")
_ALT_OFF = (b"\x1b[?1049l", b"\x1b[?1047l", b"\x1b[?47l")

_KEYS: dict[str, bytes] = {
    "Enter": b"\r",
    "KPEnter": b"\r",
    "Escape": b"\x1b",
    "Tab": b"\t",
    "BTab": b"\x1b[Z",
    "BSpace": b"\x7f",
    "Space": b" ",
    "Up": b"\x1b[A",
    "Down": b"\x1b[B",
    "Right": b"\x1b[C",
    "Left": b"\x1b[D",
    "Home": b"\x1b[H",
    "End": b"\x1b[F",
    "PageUp": b"\x1b[5~",
    "PPage": b"\x1b[5~",
    "PageDown": b"\x1b[6~",
    "NPage": b"\x1b[6~",
    "DC": b"\x1b[3~",
    "IC": b"\x1b[2~",
    "F1": b"\x1bOP",
    "F2": b"\x1bOQ",
    "F3": b"\x1bOR",
    "F4": b"\x1bOS",
    "F5": b"\x1b[15~",
    "F6": b"\x1b[17~",
    "F7": b"\x1b[18~",
    "F8": b"\x1b[19~",
    "F9": b"\x1b[20~",
    "F10": b"\x1b[21~",
    "F11": b"\x1b[23~",
    "F12": b"\x1b[24~",
}


def key_bytes(key: str) -> bytes:
    r"""The bytes a terminal sends for a tmux-style key name.

    Examples
    --------
    >>> key_bytes("Enter"), key_bytes("C-c"), key_bytes("M-x"), key_bytes("y")
    (b'\r', b'\x03', b'\x1bx', b'y')
    """
    check_key(key)
    if key in _KEYS:
        return _KEYS[key]
    if key.startswith("C-") and len(key) == 3:
        ch = key[2].lower()
        if "a" <= ch <= "z":
            return bytes([ord(ch) - ord("a") + 1])
        return {"@": b"\x00", "[": b"\x1b", "\\": b"\x1c", "]": b"\x1d"}.get(
            key[2], key[2:].encode()
        )
    if key.startswith("M-"):
        return b"\x1b" + key_bytes(key[2:])
    if key.startswith("S-") and key[2:] in _KEYS:
        return _KEYS[key[2:]]
    return key.encode()


class PtyTerminal:
    """A program running in a pseudo-terminal that politerm can read and type into.

    Create with :meth:`spawn`. Implements :class:`~politerm.terminal.Terminal`.

    Parameters
    ----------
    proc
        The spawned :class:`ptyprocess.PtyProcess`.
    size
        (columns, rows) of the terminal.
    name
        Display name.
    history
        Scrollback lines kept by the rendered screen.
    """

    def __init__(
        self,
        proc: ptyprocess.PtyProcess,
        size: tuple[int, int],
        *,
        name: str = "pty",
        history: int = 5000,
    ) -> None:
        cols, rows = size
        self.proc = proc
        self._name = name
        self.screen = pyte.HistoryScreen(cols, rows, history=history)
        self._stream = pyte.ByteStream(self.screen)
        self._event = asyncio.Event()
        self._callbacks: list[ByteCallback] = []
        self._options: dict[str, str] = {}
        self._write_lock = asyncio.Lock()
        self._eof = False
        self._exited = asyncio.Event()
        self._exit_status: int | None = None
        self._mode_tail = b""
        self.bracketed_paste = False
        self.alternate_screen = False
        self.output_seq = 0
        self.last_output = 0.0
        self._loop = asyncio.get_running_loop()
        self._reaper: asyncio.Task[None] | None = None
        os.set_blocking(proc.fd, False)
        self._loop.add_reader(proc.fd, self._on_readable)

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        size: tuple[int, int] = (200, 50),
        name: str | None = None,
    ) -> PtyTerminal:
        """Start ``argv`` in a new pseudo-terminal of ``size`` (columns, rows).

        Raises
        ------
        PtyError
            No pseudo-terminal could be allocated, or the program could not be started; the
            message says what to do.
        """
        if not argv:
            msg = "no command to run in the pseudo-terminal"
            raise PtyError(msg)
        cols, rows = size
        full_env = {**os.environ, **(env or {})}
        full_env.setdefault("TERM", "xterm-256color")
        for var in NOT_INHERITED:  # another tmux's handle; a size that is not this PTY's
            full_env.pop(var, None)
        try:
            proc = ptyprocess.PtyProcess.spawn(
                list(argv),
                cwd=str(cwd) if cwd is not None else None,
                env=full_env,
                dimensions=(rows, cols),
            )
        except FileNotFoundError as exc:
            msg = f"cannot start {argv[0]!r}: command not found ({exc.strerror or exc})"
            raise PtyError(msg) from None
        except OSError as exc:
            raise PtyError(no_pty_message(exc)) from None
        return cls(proc, size, name=name or f"pty:{pathlib.PurePath(argv[0]).name}")

    def __repr__(self) -> str:
        return f"PtyTerminal({self._name}, pid={self.proc.pid})"

    # --- Terminal -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """Display name."""
        return self._name

    async def pid(self) -> int | None:
        """The program's process id; None once it has exited."""
        return int(self.proc.pid) if self.is_alive() else None

    def host_gone(self) -> str | None:
        """None: a PTY has no host that could go away under it."""
        return None

    def live_view(
        self, *, fields: Callable[[], Sequence[str]], on_interrupt: Callable[[], None]
    ) -> LiveView:
        """The operator's terminal attached to this PTY, with a status line (``async with``)."""
        return LiveView(self, fields=fields, on_interrupt=on_interrupt)

    async def snapshot(self) -> Snapshot:
        """The rendered screen, cursor and liveness now."""
        alive = self.is_alive()
        lines = tuple(line.rstrip() for line in self.screen.display)
        return Snapshot(
            lines=lines,
            cursor_x=self.screen.cursor.x,
            cursor_y=self.screen.cursor.y,
            alive=alive,
            exit_status=None if alive else self._exit_status,
            history_size=len(self.screen.history.top),
            alternate_screen=self.alternate_screen,
            title=str(self.screen.title or ""),
            trailing_spaces=False,
        )

    async def capture_history(self) -> list[str]:
        """The scrollback kept by the rendered screen, then the screen (as a tmux pane's)."""
        cols = self.screen.columns
        # A wide character's second cell holds "": joining the cells gives the text.
        top = ["".join(ln[x].data for x in range(cols)).rstrip() for ln in self.screen.history.top]
        return [*top, *(ln.rstrip() for ln in self.screen.display)]

    async def paste(self, data: bytes, *, bracketed: bool = True, keep_lf: bool = True) -> None:
        """Write ``data`` as a paste: bracketed when the program asked for it, as tmux does."""
        data = sanitize_paste(data)
        if not keep_lf:
            data = data.replace(b"\r\n", b"\r").replace(b"\n", b"\r")
        if bracketed and self.bracketed_paste:
            data = b"\x1b[200~" + data + b"\x1b[201~"
        await self.write(data)

    async def send_keys(self, *keys: str) -> None:
        """Press named keys (``Enter``, ``Escape``, ``C-c``) or single characters."""
        data = b"".join(key_bytes(k) for k in keys)
        await self.write(data)

    async def prepare_input(self) -> None:
        """Nothing to do: a PTY has no copy mode."""

    def output_event(self) -> asyncio.Event:
        """An event set by the program's next output (or its exit)."""
        return self._event

    async def lines_from(self, snap: Snapshot, row: int) -> list[str]:
        """The whole screen: a rendered screen's rows cannot be addressed past it."""
        return list(snap.lines)

    async def get_option(self, name: str) -> str | None:
        """A user option kept with this terminal (in memory); None when unset."""
        return self._options.get(name)

    async def set_option(self, name: str, value: str) -> None:
        """Keep a user option with this terminal, for as long as this process runs it."""
        self._options[name] = value

    # --- beyond Terminal ------------------------------------------------------------------

    def subscribe(self, callback: ByteCallback) -> Callable[[], None]:
        """Call ``callback(data)`` with every raw output chunk; returns an unsubscribe."""
        return listen(self._callbacks, callback)

    def is_alive(self) -> bool:
        """Whether the program still runs (reaps it when it has exited)."""
        if self._exit_status is not None:
            return False
        try:
            alive = bool(self.proc.isalive())
        except ptyprocess.PtyProcessError:
            alive = False
        if not alive:
            self._record_exit()
        return alive

    @property
    def exit_status(self) -> int | None:
        """The exit status once the program has exited (128+N for signal N)."""
        return self._exit_status

    async def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` for the program to exit; its status, or None if it runs."""
        if not self.is_alive():
            return self._exit_status
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.is_alive():
                    ev = self._exited
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.1):
                            await ev.wait()
        return self._exit_status

    async def write(self, data: bytes) -> None:
        """Write bytes to the program's terminal, in chunks, without blocking the loop."""
        async with self._write_lock:
            view = memoryview(data)
            while view:
                if self._eof:
                    msg = f"{self._name}: the program's terminal is closed"
                    raise PtyError(msg)
                try:
                    n = os.write(self.proc.fd, view[:WRITE_CHUNK])
                except BlockingIOError:
                    await self._writable()
                    continue
                except OSError as exc:
                    msg = f"{self._name}: cannot write to the terminal: {exc.strerror or exc}"
                    raise PtyError(msg) from None
                view = view[n:]

    async def _writable(self) -> None:
        fut: asyncio.Future[None] = self._loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self._loop.add_writer(self.proc.fd, ready)
        try:
            async with asyncio.timeout(1.0):
                await fut
        except TimeoutError:
            pass
        finally:
            self._loop.remove_writer(self.proc.fd)

    def resize(self, cols: int, rows: int) -> None:
        """Resize the terminal (the program gets SIGWINCH) and the rendered screen."""
        cols, rows = max(cols, 10), max(rows, 3)
        self.screen.resize(rows, cols)
        if not self._eof:
            with contextlib.suppress(OSError):
                self.proc.setwinsize(rows, cols)

    async def kill(self, *, grace: float = 3.0) -> None:
        """Stop the program and its whole process tree, verified gone; close the terminal."""
        if self.is_alive():
            # Our own child is reaped here (to keep its exit status), the rest by psutil.
            pid = int(self.proc.pid)
            others = [p for p in process_tree(pid) if p.pid != pid]
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            reap = asyncio.to_thread(kill_processes, others, grace=grace, what=self._name)
            _, status = await asyncio.gather(reap, self.wait_exit(grace))
            if status is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                if await self.wait_exit(grace) is None:
                    msg = f"{self._name}: process {pid} survived SIGKILL"
                    raise PtyError(msg)
        self.close()

    def close(self) -> None:
        """Stop reading and close the PTY (the program, if still running, gets SIGHUP)."""
        if not self._eof:
            self._on_eof()
        # Close the fd once, through the file object ptyprocess owns it by, and tell it so:
        # a bare os.close() would leave ptyprocess to close the same number again when it is
        # collected, by then perhaps another terminal's.
        with contextlib.suppress(OSError):
            self.proc.fileobj.close()
        self.proc.closed = True
        self.is_alive()

    # --- reading --------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data = os.read(self.proc.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            # EIO is how Linux reports that the program closed its side of the terminal.
            if exc.errno not in (errno.EIO, errno.EBADF):
                raise
            data = b""
        if not data:
            self._on_eof()
            return
        self._track_modes(data)
        self._stream.feed(data)
        self.output_seq += 1
        self.last_output = time.monotonic()
        for cb in list(self._callbacks):
            cb(data)
        self._wake()

    def _track_modes(self, data: bytes) -> None:
        # Mode switches may straddle two reads; look at the end of the last one too.
        buf = self._mode_tail + data
        for seq, value in ((_BRACKETED_ON, True), (_BRACKETED_OFF, False)):
            pos = buf.rfind(seq)
            if pos >= 0:
                other = buf.rfind(_BRACKETED_OFF if value else _BRACKETED_ON)
                if pos > other:
                    self.bracketed_paste = value
        last_on = max(buf.rfind(s) for s in _ALT_ON)
        last_off = max(buf.rfind(s) for s in _ALT_OFF)
        if last_on != last_off:
            self.alternate_screen = last_on > last_off
        self._mode_tail = buf[-8:]

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def _on_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.proc.fd)
        self._wake()
        if self._reaper is None and self.is_alive():
            self._reaper = self._loop.create_task(self._reap())

    async def _reap(self) -> None:
        # The program closed its terminal; it exits soon after (or is killed by kill()).
        delay = 0.01
        while self.is_alive():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _record_exit(self) -> None:
        if self._exit_status is not None:
            return
        status = self.proc.exitstatus
        if status is None and self.proc.signalstatus is not None:
            status = 128 + int(self.proc.signalstatus)
        self._exit_status = int(status) if status is not None else -1
        self._exited.set()
        self._wake()


def no_pty_message(exc: OSError) -> str:
    """An actionable one-line message for a failure to allocate a pseudo-terminal.

    Examples
    --------
    >>> no_pty_message(OSError(24, "Too many open files")).split(";")[0]
    'cannot allocate a pseudo-terminal: Too many open files'
    """
    what = exc.strerror or str(exc)
    return (
        f"cannot allocate a pseudo-terminal: {what}; "
        "check that /dev/ptmx and /dev/pts exist and are mounted (in containers: mount devpts), "
        "that the process may open more files (ulimit -n), "
        "or run the session in tmux instead with --tmux"
    )
