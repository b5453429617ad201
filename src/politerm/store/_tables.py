"""What every workflow's tables share: the run store they live in, its redactor and clock."""

from __future__ import annotations

import dataclasses
import enum
import typing as t

from politerm.redact import Redactor

if t.TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    from politerm.store import RunStore

R = t.TypeVar("R")


def record_of(cls: type[R], row: sqlite3.Row, **convert: Callable[[t.Any], t.Any]) -> R:
    """The dataclass record ``cls`` of ``row``: each field the column of its name.

    ``convert`` turns a column's stored value into the field's (an enum, a flag, JSON).
    """
    values = {name: row[name] for name in _fields(cls)}
    for name, to in convert.items():
        values[name] = to(values[name])
    return cls(**values)


def row_mapper(cls: type[R], **convert: Callable[[t.Any], t.Any]) -> Callable[[sqlite3.Row], R]:
    """The function that makes the record ``cls`` of a row (:func:`record_of`, ``convert``)."""
    return lambda row: record_of(cls, row, **convert)


def where(**filters: t.Any) -> tuple[str, list[t.Any]]:
    """A ``WHERE`` clause over every filter given (not None), and its arguments.

    A collection is a set of values (``IN``); an enum member stands for its value.

    Examples
    --------
    >>> where(task_id="T1", agent=None, state=["b", "a"])
    (' WHERE task_id = ? AND state IN (?, ?)', ['T1', 'a', 'b'])
    >>> where(agent=None)
    ('', [])
    """
    clauses: list[str] = []
    args: list[t.Any] = []
    for column, value in filters.items():
        if value is None:
            continue
        if isinstance(value, list | tuple | set | frozenset):
            values = sorted(_value(v) for v in value)
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            args += values
        else:
            clauses.append(f"{column} = ?")
            args.append(_value(value))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _value(value: t.Any) -> t.Any:
    return value.value if isinstance(value, enum.Enum) else value


def insert(
    c: sqlite3.Connection, table: str, values: t.Mapping[str, t.Any], conflict: str = ""
) -> t.Any:
    """Write ``values`` (column: value) as a row of ``table``; return the row as written.

    ``conflict``: an ``ON CONFLICT`` clause; the row is None when it wrote nothing.
    """
    sql = f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})"
    return c.execute(f"{sql} {conflict} RETURNING *", tuple(values.values())).fetchone()


def update_set(key: str, columns: t.Iterable[str]) -> str:
    """The ``ON CONFLICT`` clause that sets ``columns`` of the row of the same ``key``.

    Examples
    --------
    >>> update_set("name", ["state", "updated"])
    'ON CONFLICT (name) DO UPDATE SET state = excluded.state, updated = excluded.updated'
    """
    sets = ", ".join(f"{col} = excluded.{col}" for col in columns)
    return f"ON CONFLICT ({key}) DO UPDATE SET {sets}"


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() walks the class on every call: a store listing is many rows.
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class StoreTables:
    """A workflow's tables inside a :class:`~politerm.store.RunStore`.

    They use the store's connection, write lock, audit log and clock; every text a subclass
    writes to the audit log is redacted first.

    Parameters
    ----------
    store
        The open run store.
    redactor
        Applied to every text before it is written.
    """

    def __init__(self, store: RunStore, redactor: Redactor | None = None) -> None:
        self.store = store
        self.redactor = redactor or Redactor()

    def _kept(self, text: str) -> str:
        """``text`` with tagged markers for its secrets, the secrets kept in the vault.

        For a text an agent is given later (a work item, the manager's instruction): the
        row holds no secret, and delivery puts the originals back (see
        :mod:`politerm._internal.vault`).
        """
        from politerm._internal import vault

        out, found = self.redactor.tagged(text)
        if found:
            vault.keep(found)
        return out

    def _audit(self, kind: str, **fields: t.Any) -> None:
        self.store._audit.append(kind, **self.redactor.redact_json(fields))

    def _now(self) -> float:
        return self.store._clock()
