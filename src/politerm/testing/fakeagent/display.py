"""The fake agent's terminal output: committed history rows plus a redrawn live region.

Two ways of drawing, as the real CLIs do: on the alternate screen the whole screen is
redrawn from the kept history; inline, finished rows scroll into the terminal's history
and only the live region at the bottom is erased and redrawn.
"""

from __future__ import annotations

import os
import typing as t

from politerm.testing.fakeagent.text import cell_width, sanitize

if t.TYPE_CHECKING:
    from politerm.testing.fakeagent.render import Screen, View

HISTORY_MAX = 5000  # rows kept for alternate-screen redraws


class Display:
    """Draws a :class:`~politerm.testing.fakeagent.render.Screen` onto a terminal fd."""

    def __init__(self, screen: Screen, fd_out: int, *, alt: bool) -> None:
        self.screen = screen
        self.fd_out = fd_out
        self.alt = alt
        self.width, self.height = 80, 24
        self.pending_rows: list[str] = []
        self.history: list[str] = []
        self.drawn: list[str] = []
        self.drawn_height = 0
        self.output_ok = True

    def setup(self, name: str) -> None:
        """Enter raw drawing: bracketed paste on, cursor hidden, maybe alt screen, title."""
        setup = "\x1b[?2004h\x1b[?25l"
        if self.alt:
            setup = "\x1b[?1049h\x1b[H\x1b[2J" + setup
        if name:
            setup += f"\x1b]0;{sanitize(name)}\x07"
        self.write(setup)

    def teardown(self) -> None:
        """Undo :meth:`setup`; an inline live region is erased."""
        teardown = "\x1b[?2004l\x1b[?25h"
        if self.alt:
            teardown += "\x1b[?1049l"
        elif self.drawn_height:
            teardown = self._erase_region() + teardown
        self.write(teardown)

    def commit(self, rows: list[str]) -> None:
        """Add finished rows above the live region (drawn on the next render)."""
        if self.alt:
            self.history += rows
            del self.history[:-HISTORY_MAX]
        else:
            self.pending_rows += rows

    def measure(self) -> None:
        """Read the terminal's size (80x24 when it has none)."""
        try:
            size = os.get_terminal_size(self.fd_out)
            self.width, self.height = max(size.columns, 10), max(size.lines, 4)
        except OSError:
            self.width, self.height = 80, 24

    def resized(self, view: View) -> None:
        """Re-measure after SIGWINCH and redraw."""
        self.measure()
        if not self.alt and self.drawn:
            # tmux re-flows the rows we drew at the old width; count what they occupy now.
            w = self.width
            self.drawn_height = sum(max(1, -(-cell_width(row) // w)) for row in self.drawn)
        self.render(view, force=True)

    def _erase_region(self) -> str:
        up = self.drawn_height - 1
        return (f"\x1b[{up}A" if up > 0 else "") + "\r\x1b[J"

    def render(self, view: View, *, force: bool = False) -> None:
        """Draw what changed since the last render (everything when ``force``)."""
        dyn = self.screen.dynamic(view, self.width, self.height)
        if not force and dyn == self.drawn and not self.pending_rows:
            return
        if self.alt:
            rows = [*self.history, *dyn][-self.height :]
            body = "\x1b[K\r\n".join(rows)
            self.write("\x1b[H" + body + "\x1b[K\x1b[J")
            self.drawn = dyn
            return
        out = [self._erase_region() if self.drawn_height else "\r\x1b[J"]
        out += [row + "\r\n" for row in self.pending_rows]
        out.append("\r\n".join(dyn))
        self.pending_rows.clear()
        self.write("".join(out))
        self.drawn = dyn
        self.drawn_height = len(dyn)

    def write(self, text: str) -> None:
        """Write to the terminal; after the first error (terminal gone) write nothing."""
        if not self.output_ok:
            return
        data = text.encode("utf-8", "replace")
        try:
            while data:
                done = os.write(self.fd_out, data)
                data = data[done:]
        except OSError:
            self.output_ok = False
