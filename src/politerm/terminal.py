"""The one interface delivery, detection and parsing need from a terminal.

Two backends implement it: a tmux pane (:class:`politerm.tmux.pane.Pane`) and, later, a
headless PTY. Everything above this layer is written against :class:`Terminal` only.
"""

from __future__ import annotations

import dataclasses
import typing as t

if t.TYPE_CHECKING:
    import asyncio


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

    def tail(self, n: int = 8) -> list[str]:
        """The last ``n`` non-blank lines, for error messages and evidence."""
        lines = [ln.rstrip() for ln in self.lines if ln.strip()]
        return lines[-n:]


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
