"""What commands print: rich on a terminal, plain full lines when piped.

On a terminal tables and styled lines are drawn by rich at the terminal's width. Piped
(``poli status | grep T-12``), rich would wrap at 80 columns and split ids across lines;
:func:`show` prints tables as tab-separated rows under a ``# title`` line and text as full,
unwrapped lines instead, so grep and copy-paste work.
"""

from __future__ import annotations

import sys
import typing as t

if t.TYPE_CHECKING:
    from rich.console import RenderableType


def is_terminal() -> bool:
    """Whether standard output is a terminal."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


def show(renderable: RenderableType) -> None:
    """Print ``renderable``: with rich on a terminal, as plain lines otherwise."""
    if is_terminal():
        from rich.console import Console

        from politerm._internal.sanitize import color_system

        Console(highlight=False, color_system=color_system()).print(renderable)
        return
    for line in plain_lines(renderable):
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def plain_lines(renderable: RenderableType) -> list[str]:
    r"""The plain-text lines of a table, text or group (tables as tab-separated rows).

    Examples
    --------
    >>> from rich.table import Table
    >>> tb = Table(title="tasks")
    >>> tb.add_column("task"); tb.add_column("state")
    >>> tb.add_row("T-1234567890-abcdef", "done")
    >>> plain_lines(tb)
    ['# tasks', 'task\tstate', 'T-1234567890-abcdef\tdone']
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if isinstance(renderable, Group):
        out: list[str] = []
        for part in renderable.renderables:
            out += plain_lines(part)
        return out
    if isinstance(renderable, Table):
        lines = [f"# {_plain(renderable.title)}"] if renderable.title else []
        lines.append("\t".join(_plain(c.header) for c in renderable.columns))
        cells = [list(c.cells) for c in renderable.columns]
        for row in range(renderable.row_count):
            lines.append("\t".join(_cell(col[row]) if row < len(col) else "" for col in cells))
        if not renderable.row_count:
            lines.append("(none)")
        return lines
    if isinstance(renderable, Text):
        return renderable.plain.splitlines() or [""]
    if isinstance(renderable, str):
        return renderable.splitlines() or [""]
    return [str(renderable)]


def _plain(value: object) -> str:
    from rich.text import Text

    if isinstance(value, Text):
        return value.plain
    return "" if value is None else str(value)


def _cell(value: object) -> str:
    # One row per line: a newline or tab inside a cell would break the columns.
    return " ".join(_plain(value).split())
