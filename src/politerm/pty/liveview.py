"""The live view: an agent's PTY streamed to the user's terminal, with a status line.

The user's terminal goes into raw mode; the agent's output is written through as it comes,
inside a scroll region that keeps the bottom row for a status line (run, item, state, elapsed)
and a key legend. Keys typed go to the agent, except Ctrl-C: the first asks for a soft stop,
the second aborts (the caller owns SIGINT and SIGTERM, which do the same without a live
view). Window-size changes are forwarded to the agent's PTY. On every way out (normal end,
exception, SIGTERM, the agent crashing) the terminal's modes are restored and the scroll
region, cursor and paste mode reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import termios
import time
import tty
import typing as t

if t.TYPE_CHECKING:
    import types
    from collections.abc import Callable

    from politerm.pty.runner import PtyTerminal

LEGEND = "^C wrap up · ^C^C abort"
_CTRL_C = b"\x03"


def status_text(width: int, fields: t.Sequence[str], legend: str = LEGEND) -> str:
    """The status line: fields on the left, the key legend on the right, ``width`` cells.

    Examples
    --------
    >>> status_text(50, ["run r1", "item a-1", "working", "0:05"], "^C stop")
    ' run r1 · item a-1 · working · 0:05       ^C stop '
    >>> len(status_text(20, ["a very long status that is cut"]))
    20
    """
    left = " " + " · ".join(f for f in fields if f)
    right = legend + " "
    room = width - len(left)
    if room >= len(right) + 1:
        return left + " " * (room - len(right)) + right
    return (left + " " * width)[:width]


class LiveView:
    """Raw-mode pass-through of one PTY session with a status line.

    Use as ``async with LiveView(term, ...):``.

    Parameters
    ----------
    term
        The agent's PTY.
    fields
        Called for the status fields (run, item, state, elapsed) at each redraw.
    on_interrupt
        Called for each Ctrl-C typed.
    fd_in, fd_out
        The user's terminal.
    """

    def __init__(
        self,
        term: PtyTerminal,
        *,
        fields: Callable[[], t.Sequence[str]],
        on_interrupt: Callable[[], None],
        fd_in: int = 0,
        fd_out: int = 1,
        legend: str = LEGEND,
    ) -> None:
        self.term = term
        self.fields = fields
        self.on_interrupt = on_interrupt
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.legend = legend
        self.cols, self.rows = 80, 24
        self._saved: list[t.Any] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._signals: list[int] = []
        self._reading = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> t.Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.restore()

    def start(self) -> None:
        """Take over the terminal."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._saved = termios.tcgetattr(self.fd_in)
        try:
            tty.setraw(self.fd_in, termios.TCSADRAIN)
            loop.add_reader(self.fd_in, self._on_input)
            self._reading = True
            loop.add_signal_handler(signal.SIGWINCH, self._on_winch)
            self._signals.append(signal.SIGWINCH)
            self._unsubscribe = self.term.subscribe(self._on_output)
            self._layout()
            self._ticker = loop.create_task(self._tick())
        except BaseException:
            self.restore()
            raise

    def restore(self) -> None:
        """Give the terminal back as it was; safe to call more than once."""
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        loop = self._loop
        if loop is not None:
            if self._reading:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(self.fd_in)
                self._reading = False
            for sig in self._signals:
                with contextlib.suppress(ValueError, RuntimeError):
                    loop.remove_signal_handler(sig)
            self._signals.clear()
        if self._saved is None:
            return
        reset = f"\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b[0m\x1b[?25h\x1b[?2004l"
        if self.term.alternate_screen:
            reset += "\x1b[?1049l"
        self._write(reset.encode() + b"\r\n")
        with contextlib.suppress(termios.error):
            termios.tcsetattr(self.fd_in, termios.TCSADRAIN, self._saved)
        self._saved = None

    # --- drawing --------------------------------------------------------------------------

    def _size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.fd_out)
        except OSError:
            return 80, 24
        return max(size.columns, 20), max(size.lines, 4)

    def _layout(self) -> None:
        self.cols, self.rows = self._size()
        self.term.resize(self.cols, self.rows - 1)
        # Scroll region: every row but the last, which keeps the status line.
        self._write(f"\x1b[1;{self.rows - 1}r\x1b[{self.rows - 1};1H".encode())
        self.draw_status()

    def draw_status(self) -> None:
        """Redraw the status line (save cursor, bottom row, reverse video, restore)."""
        text = status_text(self.cols, self.fields(), self.legend)
        self._write(f"\x1b7\x1b[{self.rows};1H\x1b[0;7m{text}\x1b[0m\x1b8".encode())

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + 2.0
        while view and time.monotonic() < deadline:
            try:
                view = view[os.write(self.fd_out, view) :]
            except BlockingIOError:
                continue
            except OSError:
                return

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.draw_status()

    # --- events ---------------------------------------------------------------------------

    def _on_output(self, data: bytes) -> None:
        self._write(data)

    def _on_winch(self) -> None:
        self._layout()

    def _on_input(self) -> None:
        try:
            data = os.read(self.fd_in, 4096)
        except OSError:
            data = b""
        if not data:
            # The user's terminal went away: stop reading it, keep the session going.
            if self._loop is not None and self._reading:
                self._loop.remove_reader(self.fd_in)
                self._reading = False
            return
        for _ in range(data.count(_CTRL_C)):
            self.on_interrupt()
        rest = data.replace(_CTRL_C, b"")
        if rest and self._loop is not None:
            task = self._loop.create_task(self.term.write(rest))
            task.add_done_callback(_ignore_result)
        self.draw_status()


def _ignore_result(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
