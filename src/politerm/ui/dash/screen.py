"""A pyte screen as rich text: the dashboard's mirror of an agent's pane."""

from __future__ import annotations

import re
import typing as t

from rich.style import Style
from rich.text import Text

if t.TYPE_CHECKING:
    import pyte

_HEX = re.compile(r"^[0-9a-fA-F]{6}$")


def colour(name: str) -> str | None:
    """A pyte colour as a rich colour (None for the terminal's default).

    Examples
    --------
    >>> colour("default"), colour("red"), colour("brightblue"), colour("ff8700")
    (None, 'red', 'bright_blue', '#ff8700')
    >>> colour("brown")
    'yellow'
    """
    if name == "default":
        return None
    if _HEX.match(name):
        return f"#{name.lower()}"
    if name.startswith("bright"):
        return "bright_" + name.removeprefix("bright")
    return "yellow" if name == "brown" else name


def _style(char: t.Any) -> Style:
    fg, bg = colour(char.fg), colour(char.bg)
    if char.reverse:
        fg, bg = bg or "black", fg or "white"
    return Style(
        color=fg,
        bgcolor=bg,
        bold=char.bold or None,
        italic=char.italics or None,
        underline=char.underscore or None,
        strike=char.strikethrough or None,
    )


def render_screen(screen: pyte.Screen, *, cursor: bool = True) -> Text:
    r"""The screen's cells, styled, one line per row; the cursor cell shown reversed.

    Examples
    --------
    >>> import pyte
    >>> s = pyte.Screen(10, 2)
    >>> pyte.ByteStream(s).feed(b"\x1b[31mhi\x1b[0m")
    >>> text = render_screen(s)
    >>> text.plain.splitlines()[0].rstrip(), str(text.spans[0].style)
    ('hi', 'red')
    """
    out = Text(no_wrap=True, overflow="crop")
    cx, cy = screen.cursor.x, screen.cursor.y
    show_cursor = cursor and not screen.cursor.hidden
    for y in range(screen.lines):
        row = screen.buffer[y]
        run: list[str] = []
        run_style: Style | None = None
        for x in range(screen.columns):
            char = row[x]
            style = _style(char)
            if show_cursor and (x, y) == (cx, cy):
                style += Style(reverse=True)
            if style != run_style and run:
                out.append("".join(run), run_style)
                run = []
            run_style = style
            run.append(char.data or " ")
        if run:
            out.append("".join(run), run_style)
        if y < screen.lines - 1:
            out.append("\n")
    return out
