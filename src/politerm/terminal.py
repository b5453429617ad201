"""The one interface delivery, detection and parsing need from a terminal.

Two backends implement it: a tmux pane (:class:`politerm.tmux.pane.Pane`) and a headless
PTY (:class:`politerm.pty.runner.PtyTerminal`). The agent driver is written against
:class:`Terminal` only: what differs between the two lives behind it.
"""

from __future__ import annotations

import dataclasses
import typing as t

if t.TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence

    from politerm.pty.liveview import LiveView


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A rendered screen at one moment, with the cursor and the program's liveness.

    ``title`` is the terminal title the program set (tmux ``#{pane_title}``), ``""`` when
    the backend cannot tell. ``trailing_spaces``: the lines keep the spaces the program
    wrote at their ends (a tmux capture); False when every line is right-stripped (a PTY's
    rendered screen), so a line of spaces cannot be told from an empty one. ``rows`` is
    the screen's height in rows (0 when unknown): tmux joins wrapped rows into one line
    (``capture-pane -J``), so ``len(lines) == rows`` says no row of this screen is wrapped.
    """

    lines: tuple[str, ...]
    cursor_x: int = 0
    cursor_y: int = 0
    alive: bool = True
    exit_status: int | None = None
    history_size: int = 0
    in_mode: bool = False
    alternate_screen: bool = False
    title: str = ""
    trailing_spaces: bool = True
    rows: int = 0

    @property
    def cursor_line(self) -> int:
        """The index in ``lines`` of the cursor's row (-1 when it cannot be on one).

        tmux joins each row it wrapped onto the row before it (``capture-pane -J``), so a
        wrapped line above the cursor leaves fewer lines than rows and ``cursor_y`` names a
        line below the cursor's own (an idle aider read as busy, "cursor off the prompt",
        while a long line of its prompt's echo stayed wrapped on the screen). The rows
        joined are taken to be above the cursor: a program waiting at its prompt has drawn
        nothing below it.

        Examples
        --------
        >>> Snapshot(("a", "b", "> "), cursor_y=2, rows=3).cursor_line
        2
        >>> Snapshot(("a long line wrapped once", "> "), cursor_y=2, rows=3).cursor_line
        1
        >>> Snapshot(("a", "> "), cursor_y=1).cursor_line  # rows unknown: as given
        1
        """
        joined = self.rows - len(self.lines) if self.rows > len(self.lines) else 0
        line = self.cursor_y - joined
        return line if 0 <= line < len(self.lines) else -1

    def tail(self, n: int = 8) -> list[str]:
        """The last ``n`` non-blank lines, for error messages and evidence."""
        lines = [ln.rstrip() for ln in self.lines if ln.strip()]
        return lines[-n:]


def on_screen(snap: Snapshot, start_line: int) -> list[str] | None:
    """The window from pane row ``start_line`` on, read off ``snap`` when rows are lines.

    That is when the window starts on the screen and no row of the screen is wrapped (then
    tmux's joined capture has one line per row, and row ``n`` of the screen is line ``n``);
    otherwise None, and the window must be captured by its row numbers.

    Examples
    --------
    >>> from politerm.terminal import Snapshot
    >>> on_screen(Snapshot(("a", "b", "c"), history_size=40, rows=3), 41)
    ['b', 'c']
    >>> on_screen(Snapshot(("a", "b c"), history_size=40, rows=3), 41) is None  # wrapped
    True
    >>> on_screen(Snapshot(("a", "b", "c"), history_size=40, rows=3), 39) is None  # history
    True
    """
    row = start_line - snap.history_size
    if not snap.rows or len(snap.lines) != snap.rows or not 0 <= row < snap.rows:
        return None
    return list(snap.lines[row:])


@t.runtime_checkable
class Terminal(t.Protocol):
    """A program running in a terminal that politerm can read and type into."""

    @property
    def name(self) -> str:
        """Display name (pane id, or PTY name)."""
        ...

    async def snapshot(self) -> Snapshot:
        """The rendered screen now."""
        ...

    async def paste(self, data: bytes, *, bracketed: bool = True, keep_lf: bool = True) -> None:
        """Deliver text as a paste (never as keystrokes)."""
        ...

    async def send_keys(self, *keys: str) -> None:
        """Press named keys."""
        ...

    async def prepare_input(self) -> None:
        """Make sure typed input reaches the program (e.g. leave tmux copy mode)."""
        ...

    def output_event(self) -> asyncio.Event:
        """An event set by the program's next output."""
        ...

    def subscribe(self, callback: Callable[[bytes], None]) -> Callable[[], None]:
        """Call ``callback`` with each raw output chunk; returns the unsubscribe."""
        ...

    async def lines_from(self, snap: Snapshot, row: int) -> list[str]:
        """The lines from ``row`` to the end of the screen ``snap`` was taken from.

        Rows count history rows, then screen rows (``snap.history_size`` of them above the
        screen); a terminal that cannot address rows gives the whole screen.
        """
        ...

    async def capture_history(self) -> list[str]:
        """The scrollback, then the screen."""
        ...

    async def get_option(self, name: str) -> str | None:
        """A user option kept with the terminal (``@name``); None when unset."""
        ...

    async def set_option(self, name: str, value: str) -> None:
        """Keep a user option with the terminal (a driver attaching later reads it)."""
        ...

    async def kill(self, *, grace: float = 3.0) -> None:
        """Kill the program's whole process tree, verified gone."""
        ...

    async def pid(self) -> int | None:
        """The program's process id; None once it has exited (or the terminal is gone)."""
        ...

    def host_gone(self) -> str | None:
        """Why the terminal's host went away (its tmux server died); None while it is up."""
        ...

    def live_view(
        self, *, fields: Callable[[], Sequence[str]], on_interrupt: Callable[[], None]
    ) -> LiveView | None:
        """The operator's terminal attached to this one, with a status line (``async with``).

        None when the operator attaches another way (to a tmux pane, with tmux).
        """
        ...
