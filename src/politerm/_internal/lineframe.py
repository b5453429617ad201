"""A live view's frame redrawn line by line: only the lines that changed are written.

``poli status --watch`` runs in a tmux window beside the agents, and every byte it prints
is an output event that tmux reads, polls for and writes to each control client. A full
redraw rewrote the whole screen on every store commit; at 500 agents the watcher was the
busiest pane of the session during a handoff (13 output chunks and 24.6 KB per task
against 6 and 8.4 KB for the Planner), although most of its lines (the agents table)
stay the same from one commit to the next.

:class:`LineFrame` keeps the lines it drew last and, for the next frame, moves the cursor
back to the frame's first line and rewrites only the lines that differ (each erased
first), clearing what is left below when the frame got shorter. The frame stays where it
was printed (no alternate screen), as a full redraw left it.
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["LineFrame"]

_ERASE_LINE = "\x1b[2K"
_ERASE_BELOW = "\x1b[J"


class LineFrame:
    r"""Draws successive frames (lists of lines, styled or not) into ``out``.

    Parameters
    ----------
    out
        Where the frames go (a terminal).
    height
        The terminal's height: a frame is cut to it, its last line then ``…``, since the
        cursor cannot go back to lines scrolled off the top.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> frame = LineFrame(out, height=10)
    >>> frame.draw(["a", "b", "c"])
    >>> frame.draw(["a", "B", "c"])
    >>> out.getvalue().split("\r")[1]
    '\x1b[2A\n\x1b[2KB\n'
    >>> frame.written  # three lines, then the one that changed
    4
    """

    def __init__(self, out: t.IO[str], *, height: int) -> None:
        self._out = out
        self.height = height
        self._lines: list[str] = []
        self.written = 0
        """How many lines were written (lines unchanged since the frame before are not)."""

    def draw(self, lines: Sequence[str]) -> None:
        """Show ``lines`` where the last frame is, writing only the lines that changed."""
        new = list(lines)
        if len(new) > self.height >= 1:
            new = [*new[: self.height - 1], "…"]
        old = self._lines
        parts: list[str] = []
        if old:
            parts.append("\r")
            if len(old) > 1:
                parts.append(f"\x1b[{len(old) - 1}A")
        for i, line in enumerate(new):
            if i:
                parts.append("\n")
            if i < len(old) and old[i] == line:
                continue
            parts.append(_ERASE_LINE + line)
            self.written += 1
        if len(new) < len(old):
            # The old frame's lines below this one are still on the screen: clear them.
            parts.append("\n" + _ERASE_BELOW + "\x1b[1A")
        self._out.write("".join(parts))
        self._out.flush()
        self._lines = new

    def resize(self, height: int) -> None:
        """The terminal's height changed: the next frame is drawn whole."""
        if height != self.height:
            self.height = height
            self.clear()

    def clear(self) -> None:
        """Erase the frame; the next one is drawn whole where this one started."""
        if self._lines:
            up = f"\x1b[{len(self._lines) - 1}A" if len(self._lines) > 1 else ""
            self._out.write("\r" + up + _ERASE_BELOW)
            self._out.flush()
        self._lines = []

    def close(self) -> None:
        """Leave the cursor below the last frame (for the shell's prompt)."""
        if self._lines:
            self._out.write("\n")
            self._out.flush()
