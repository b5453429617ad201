"""The dashboard's tables, drawn cell by cell: a refresh draws again only what changed.

At 500 agents a refresh hands the agents' table 500 rows, nearly all as they were: each
table's rows drawn (key and cells, compared by value) are kept, so that the same keys in
the same order update the changed cells in place, and anything else fills the table again.
"""

from __future__ import annotations

import typing as t

from rich.cells import cell_len
from rich.text import Text

if t.TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from textual.widgets import DataTable
    from textual.widgets.data_table import ColumnKey

Row: t.TypeAlias = "tuple[str, Sequence[object]]"
"""A table row: its key and its cells."""


class Tables:
    """Each table's column keys and the rows drawn in it."""

    def __init__(self) -> None:
        self._columns: dict[str, list[ColumnKey]] = {}
        self._drawn: dict[str, list[tuple[str, tuple[object, ...]]]] = {}
        self.rows_drawn = 0
        """How many table rows the refreshes added or changed (a row drawn again counts)."""

    def add_columns(self, table: DataTable[t.Any], names: Sequence[str]) -> None:
        """Give ``table`` its columns."""
        self._columns[str(table.id)] = table.add_columns(*names)

    def fill(
        self,
        table: DataTable[t.Any],
        rows: Sequence[Row],
        keep: Callable[..., bool],
        cursor_on: Callable[[str], bool] | None = None,
    ) -> None:
        """Show the ``rows`` that ``keep`` keeps in ``table``, drawing only what changed.

        The same keys in the same order: the changed cells are updated in place. Otherwise
        (rows came, went or moved; the filter changed) the table is filled again, its cursor
        on the last row ``cursor_on`` picks, else where it was.
        """
        name = str(table.id)
        # Textual reads a str cell as markup: agent and user text ("list[/]") is plain Text.
        kept = [
            (key, tuple(Text(c) if isinstance(c, str) else c for c in cells))
            for key, cells in unique_keys(rows)
            if keep(*cells)
        ]
        drawn = self._drawn.get(name)
        self._drawn[name] = kept
        if drawn is not None and [k for k, _ in drawn] == [k for k, _ in kept]:
            columns = self._columns[name]
            for (key, new), (_, old) in zip(kept, drawn, strict=True):
                changed = [i for i, (a, b) in enumerate(zip(new, old, strict=True)) if differ(a, b)]
                for i in changed:
                    # Widening is cheap; a narrower cell would have the table measure every
                    # cell of its column again (500 at 500 agents): then the width stays.
                    wider = width(new[i]) > table.columns[columns[i]].content_width
                    table.update_cell(key, columns[i], new[i], update_width=wider)
                self.rows_drawn += bool(changed)
            return
        cursor = table.cursor_row
        table.clear()
        for key, cells in kept:
            table.add_row(*cells, key=key)
        self.rows_drawn += len(kept)
        if cursor_on is not None:
            for i, (key, _) in enumerate(kept):
                if cursor_on(key):
                    cursor = i
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))


def unique_keys(
    rows: Sequence[Row],
) -> list[Row]:
    """``rows`` with each key made unique (a table refuses a key twice).

    Examples
    --------
    >>> [k for k, _ in unique_keys([("a", ()), ("b", ()), ("a", ()), ("a", ())])]
    ['a', 'b', 'a#2', 'a#3']
    """
    seen: dict[str, int] = {}
    out: list[Row] = []
    for key, cells in rows:
        seen[key] = seen.get(key, 0) + 1
        out.append((key if seen[key] == 1 else f"{key}#{seen[key]}", cells))
    return out


def width(cell: object) -> int:
    """The terminal cells ``cell`` takes.

    Examples
    --------
    >>> width(Text("busy")), width(42), width("日本")
    (4, 2, 4)
    """
    return cell_len(cell.plain if isinstance(cell, Text) else str(cell))


def differ(a: object, b: object) -> bool:
    """Whether two cells draw differently (rich's ``Text`` equality ignores the style).

    Examples
    --------
    >>> differ(Text("busy", style="cyan"), Text("busy", style="green")), differ(3, 3)
    (True, False)
    """
    if isinstance(a, Text) and isinstance(b, Text):
        return a.plain != b.plain or str(a.style) != str(b.style) or a.spans != b.spans
    return type(a) is not type(b) or a != b
