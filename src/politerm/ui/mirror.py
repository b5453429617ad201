"""The dashboard's mirror of a pane: a pyte screen fed the bytes of an observer's mirror.

The bytes come from :meth:`politerm.driver.observer.Observer.mirror` (its first screen, then
the pane's output); this module only keeps them as a screen to draw.
"""

from __future__ import annotations

import pyte


class ScreenMirror:
    r"""A pyte screen kept up to date from a pane's bytes (the dashboard's mirror).

    Examples
    --------
    >>> m = ScreenMirror(20, 3)
    >>> m.feed(b"\x1b[1mhello\x1b[0m\r\nworld")
    >>> m.lines()
    ['hello', 'world', '']
    """

    def __init__(self, width: int, height: int) -> None:
        self.screen = pyte.Screen(width, height)
        self.stream = pyte.ByteStream(self.screen)

    def feed(self, data: bytes) -> None:
        """Apply bytes the pane wrote."""
        self.stream.feed(data)

    def resize(self, width: int, height: int) -> None:
        """Follow the pane's size."""
        self.screen.resize(height, width)

    def lines(self) -> list[str]:
        """The screen as plain text, trailing spaces stripped."""
        return [line.rstrip() for line in self.screen.display]

    @property
    def cursor(self) -> tuple[int, int]:
        """The cursor as (column, row)."""
        return self.screen.cursor.x, self.screen.cursor.y
