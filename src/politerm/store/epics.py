"""Epic runs in the run store: the built-in work queue, runs, session records and summaries.

Tables come from schema version 3 (see :mod:`politerm.store.db`). Every text that an agent or
a person wrote passes through a :class:`~politerm.redact.Redactor` before it is written to
SQLite or to the audit log, so no secret reaches the disk by this path.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import typing as t

from politerm.errors import StoreError, WorkItemError
from politerm.store._tables import StoreTables, insert, row_mapper, update_set, where

if t.TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterable, Mapping, Sequence


RECORD_SCHEMA: t.Final = 1
"""Version of the session record shape (``record_schema`` column, and ``poli export``)."""

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


class WorkState(str, enum.Enum):
    """Where a work item of the built-in queue stands."""

    OPEN = "open"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    NEEDS_HELP = "needs_help"


class SessionStatus(str, enum.Enum):
    """How a session (or summary) stands or ended."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    NEEDS_HELP = "needs_help"
    ERROR = "error"
    ABORTED = "aborted"

    @property
    def finished(self) -> bool:
        """The item got an answer (``--resume`` skips it): success or needs_help."""
        return self in (SessionStatus.SUCCESS, SessionStatus.NEEDS_HELP)


class RecordKind(str, enum.Enum):
    """What a record is about."""

    SESSION = "session"
    SUMMARY = "summary"


@dataclasses.dataclass(frozen=True)
class Epic:
    """An epic of the built-in queue."""

    name: str
    title: str
    prompt: str
    created: float


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """One unit of work: from the built-in queue or from ``bd``."""

    id: str
    epic: str
    title: str
    body: str = ""
    priority: int = 2
    state: str = WorkState.OPEN.value
    depends_on: tuple[str, ...] = ()
    note: str | None = None
    created: float = 0.0
    updated: float = 0.0


@dataclasses.dataclass(frozen=True)
class EpicRun:
    """One ``poli go`` run over an epic."""

    id: str
    epic: str
    repo_root: str
    source: str
    agent: str
    state: str
    started: float
    finished: float | None
    config_hash: str


@dataclasses.dataclass(frozen=True)
class SessionRecord:
    """One session (or summary) as recorded; what ``poli log`` and ``poli export`` show."""

    id: str
    kind: str
    epic: str
    status: str
    queued: float
    run_id: str | None = None
    repo_root: str = ""
    item_id: str | None = None
    agent_binary: str = ""
    agent_version: str | None = None
    model: str | None = None
    flags: tuple[str, ...] = ()
    commit_summary: str | None = None
    commit_body: str | None = None
    started: float | None = None
    finished: float | None = None
    transcript_path: str | None = None
    config_hash: str = ""
    redaction: str = "clean"
    escalation: str | None = None
    error: str | None = None
    drift: tuple[str, ...] = ()
    record_schema: int = RECORD_SCHEMA

    def to_json(self) -> dict[str, t.Any]:
        """A JSON-ready dict (lists for tuples)."""
        out = dataclasses.asdict(self)
        out["flags"] = list(self.flags)
        out["drift"] = list(self.drift)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, t.Any]) -> SessionRecord:
        """Build a record from :meth:`to_json` output (``poli import``).

        Raises
        ------
        StoreError
            Missing or unknown keys, or a record schema newer than ours.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(data) - set(fields)
        if unknown:
            msg = f"unknown record keys: {', '.join(sorted(unknown))}"
            raise StoreError(msg)
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            msg = f"missing record keys: {', '.join(missing)}"
            raise StoreError(msg)
        for name, value in data.items():
            wanted = str(fields[name].type)
            if not _fits(value, wanted):
                msg = f"record key {name}: expected {wanted}, got {value!r}"
                raise StoreError(msg)
        for name, enum_type in (("kind", RecordKind), ("status", SessionStatus)):
            known = [m.value for m in enum_type]
            if data[name] not in known:
                msg = f"record key {name}: expected one of {', '.join(known)}, got {data[name]!r}"
                raise StoreError(msg)
        schema = int(data.get("record_schema", RECORD_SCHEMA))
        if schema > RECORD_SCHEMA:
            msg = f"record schema {schema} is newer than this politerm's {RECORD_SCHEMA}"
            raise StoreError(msg)
        values = dict(data)
        values["flags"] = tuple(values.get("flags") or ())
        values["drift"] = tuple(values.get("drift") or ())
        values["record_schema"] = schema
        return cls(**values)


def _fits(value: object, annotation: str) -> bool:
    """Whether a JSON value fits a record field's annotation (as written in the class).

    Examples
    --------
    >>> _fits(None, "str | None"), _fits(3, "float"), _fits(True, "float"), _fits("x", "int")
    (True, True, False, False)
    >>> _fits(["a", "b"], "tuple[str, ...]"), _fits(["a", 1], "tuple[str, ...]")
    (True, False)
    """
    for kind in annotation.split(" | "):
        if kind == "None" and value is None:
            return True
        if isinstance(value, bool):  # JSON true/false is no number
            continue
        if kind == "str" and isinstance(value, str):
            return True
        if kind == "int" and isinstance(value, int):
            return True
        if kind == "float" and isinstance(value, int | float):
            return True
        if kind == "tuple[str, ...]" and isinstance(value, list | tuple):
            return all(isinstance(x, str) for x in value)
    return False


_RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SessionRecord))


def _strings(raw: str) -> tuple[str, ...]:
    return tuple(json.loads(raw))


_record = row_mapper(SessionRecord, flags=_strings, drift=_strings)
_run = row_mapper(EpicRun)
_epic = row_mapper(Epic)


def check_id(value: str, what: str) -> str:
    """Return ``value`` if it is a usable id (letters, digits, ``._:-``), else raise.

    Examples
    --------
    >>> check_id("auth-1", "item id")
    'auth-1'
    >>> check_id("a b", "item id")
    Traceback (most recent call last):
    ...
    politerm.errors.WorkItemError: item id 'a b': use letters, digits, '.', '_', ':' or '-'
    """
    if not _ID_RE.match(value):
        msg = f"{what} {value!r}: use letters, digits, '.', '_', ':' or '-'"
        raise WorkItemError(msg)
    return value


class EpicStore(StoreTables):
    """Epic tables of a :class:`~politerm.store.RunStore` (same connection, lock and audit log).

    Parameters
    ----------
    store
        An open run store at schema version 3 or later.
    redactor
        Applied to every text before it is written.
    """

    # --- epics and work items -------------------------------------------------------------

    def ensure_epic(self, name: str, *, title: str = "", prompt: str = "") -> Epic:
        """Create the epic unless it exists (then only non-empty title/prompt update it)."""
        check_id(name, "epic")
        title, prompt = self._kept(title), self._kept(prompt)
        now = self._now()
        values = {"name": name, "title": title, "prompt": prompt, "created": now}
        conflict = (
            "ON CONFLICT(name) DO UPDATE SET"
            " title = CASE WHEN excluded.title != '' THEN excluded.title ELSE title END,"
            " prompt = CASE WHEN excluded.prompt != '' THEN excluded.prompt ELSE prompt END"
        )
        with self.store._writing() as c:
            row = insert(c, "epics", values, conflict)
        self._audit("epic.ensure", epic=name, title=title)
        return _epic(row)

    def get_epic(self, name: str) -> Epic | None:
        """The epic called ``name``, if it exists."""
        return self.store._one(_epic, "SELECT * FROM epics WHERE name = ?", name)

    def add_item(
        self,
        epic: str,
        title: str,
        *,
        body: str = "",
        priority: int = 2,
        depends_on: Sequence[str] = (),
        item_id: str | None = None,
    ) -> WorkItem:
        """Add a work item to ``epic`` (created if needed).

        Raises
        ------
        WorkItemError
            Empty title, bad priority, a duplicate id, or a dependency that does not exist.
        """
        if not title.strip():
            msg = "a work item needs a title"
            raise WorkItemError(msg)
        if not 0 <= priority <= 4:
            msg = f"priority must be 0 (highest) to 4, got {priority}"
            raise WorkItemError(msg)
        self.ensure_epic(epic)
        title, body = self._kept(title), self._kept(body)
        now = self._now()
        with self.store._writing() as c:
            if item_id is None:
                n = c.execute("SELECT COUNT(*) FROM work_items WHERE epic = ?", (epic,)).fetchone()
                item_id = f"{epic}-{int(n[0]) + 1}"
                while c.execute("SELECT 1 FROM work_items WHERE id = ?", (item_id,)).fetchone():
                    item_id += "x"
            check_id(item_id, "item id")
            if c.execute("SELECT 1 FROM work_items WHERE id = ?", (item_id,)).fetchone():
                msg = f"work item {item_id!r} already exists"
                raise WorkItemError(msg)
            for dep in depends_on:
                if dep == item_id:
                    msg = f"work item {item_id!r} cannot depend on itself (--after {dep})"
                    raise WorkItemError(msg)
                if not c.execute("SELECT 1 FROM work_items WHERE id = ?", (dep,)).fetchone():
                    msg = f"work item {item_id!r} depends on {dep!r}, which does not exist"
                    raise WorkItemError(msg)
            values: dict[str, t.Any] = {"id": item_id, "epic": epic, "title": title, "body": body}
            values |= {"priority": priority, "state": WorkState.OPEN.value}
            insert(c, "work_items", values | {"created": now, "updated": now})
            c.executemany(
                "INSERT OR IGNORE INTO work_deps (item_id, depends_on) VALUES (?, ?)",
                [(item_id, dep) for dep in depends_on],
            )
        self._audit("work.add", item=item_id, epic=epic, title=title, depends_on=list(depends_on))
        item = self.get_item(item_id)
        assert item is not None
        return item

    def _item(self, c: sqlite3.Connection, row: sqlite3.Row) -> WorkItem:
        deps = c.execute(
            "SELECT depends_on FROM work_deps WHERE item_id = ? ORDER BY depends_on", (row["id"],)
        ).fetchall()
        return WorkItem(
            id=row["id"],
            epic=row["epic"],
            title=row["title"],
            body=row["body"],
            priority=row["priority"],
            state=row["state"],
            depends_on=tuple(d[0] for d in deps),
            note=row["note"],
            created=row["created"],
            updated=row["updated"],
        )

    def get_item(self, item_id: str) -> WorkItem | None:
        """The work item ``item_id``, if it exists."""
        with self.store._reading() as c:
            row = c.execute("SELECT * FROM work_items WHERE id = ?", (item_id,)).fetchone()
            return self._item(c, row) if row else None

    def list_items(self, epic: str | None = None) -> list[WorkItem]:
        """Work items (of one epic), by priority then age."""
        sql, args = where(epic=epic)
        sql = f"SELECT * FROM work_items{sql}"
        with self.store._reading() as c:
            rows = c.execute(sql + " ORDER BY priority, created, id", args).fetchall()
            return [self._item(c, r) for r in rows]

    def ready_items(self, epic: str) -> list[WorkItem]:
        """Open items of ``epic`` whose every dependency is done, by priority then age."""
        with self.store._reading() as c:
            rows = c.execute(
                "SELECT * FROM work_items w WHERE w.epic = ? AND w.state = ? AND NOT EXISTS ("
                " SELECT 1 FROM work_deps d JOIN work_items o ON o.id = d.depends_on"
                " WHERE d.item_id = w.id AND o.state != ?)"
                " ORDER BY w.priority, w.created, w.id",
                (epic, WorkState.OPEN.value, WorkState.DONE.value),
            ).fetchall()
            return [self._item(c, r) for r in rows]

    def set_item_state(
        self, item_id: str, state: WorkState, *, note: str | None = None
    ) -> WorkItem:
        """Move a work item to ``state`` (with an optional note, e.g. the escalation).

        Raises
        ------
        WorkItemError
            No such item.
        """
        note = self.redactor.redact_opt(note)
        with self.store._writing() as c:
            cur = c.execute(
                "UPDATE work_items SET state = ?, note = COALESCE(?, note), updated = ?"
                " WHERE id = ?",
                (state.value, note, self._now(), item_id),
            )
            if cur.rowcount == 0:
                msg = f"no work item {item_id!r}"
                raise WorkItemError(msg)
        self._audit("work.state", item=item_id, state=state.value, note=note)
        item = self.get_item(item_id)
        assert item is not None
        return item

    # --- runs -----------------------------------------------------------------------------

    def create_run(
        self, run_id: str, *, epic: str, repo_root: str, source: str, agent: str, config_hash: str
    ) -> EpicRun:
        """Record the start of a ``poli go`` run."""
        said = {"epic": epic, "source": source, "agent": agent}
        values: dict[str, t.Any] = {"id": run_id, "repo_root": repo_root, **said}
        values |= {"config_hash": config_hash, "state": "running", "started": self._now()}
        with self.store._writing() as c:
            run = _run(insert(c, "epic_runs", values))
        self._audit("run.start", run=run_id, **said)
        return run

    def get_run(self, run_id: str) -> EpicRun | None:
        """The run ``run_id``, if recorded."""
        return self.store._one(_run, "SELECT * FROM epic_runs WHERE id = ?", run_id)

    def list_runs(self, limit: int = 20) -> list[EpicRun]:
        """The newest ``limit`` runs, newest first."""
        return self.store._all(
            _run, "SELECT * FROM epic_runs ORDER BY started DESC, id DESC LIMIT ?", limit
        )

    def set_run_state(self, run_id: str, state: str, *, finished: bool = True) -> None:
        """Mark a run ``state`` (``done``, ``stopped``, ``aborted``, ``running``)."""
        with self.store._writing() as c:
            c.execute(
                "UPDATE epic_runs SET state = ?, finished = ? WHERE id = ?",
                (state, self._now() if finished else None, run_id),
            )
        self._audit("run.state", run=run_id, state=state)

    # --- records --------------------------------------------------------------------------

    def _clean(self, record: SessionRecord) -> SessionRecord:
        r = self.redactor
        return dataclasses.replace(
            record,
            repo_root=r.redact(record.repo_root),
            agent_binary=r.redact(record.agent_binary),
            agent_version=r.redact_opt(record.agent_version),
            model=r.redact_opt(record.model),
            flags=tuple(r.redact(f) for f in record.flags),
            commit_summary=r.redact_opt(record.commit_summary),
            commit_body=r.redact_opt(record.commit_body),
            transcript_path=r.redact_opt(record.transcript_path),
            escalation=r.redact_opt(record.escalation),
            error=r.redact_opt(record.error),
            drift=tuple(r.redact(d) for d in record.drift),
        )

    def _row(self, record: SessionRecord) -> dict[str, t.Any]:
        values = dataclasses.asdict(record)
        values["flags"] = json.dumps(list(record.flags), ensure_ascii=False)
        values["drift"] = json.dumps(list(record.drift), ensure_ascii=False)
        return values

    def add_record(self, record: SessionRecord, *, replace: bool = False) -> bool:
        """Write a record (redacted); False when one with its id exists and not ``replace``."""
        record = self._clean(record)
        # An upsert, not INSERT OR REPLACE: the row's turn_id (the journal of turns') stays.
        conflict = update_set("id", _RECORD_COLUMNS) if replace else "ON CONFLICT (id) DO NOTHING"
        with self.store._writing() as c:
            added = insert(c, "session_records", self._row(record), conflict) is not None
        if added:
            self._audit("record.write", **_audit_fields(record))
        return added

    def update_record(self, record_id: str, **changes: t.Any) -> SessionRecord:
        """Change fields of a record (redacted); returns the new record.

        Raises
        ------
        StoreError
            No such record.
        """
        current = self.get_record(record_id)
        if current is None:
            msg = f"no session record {record_id!r}"
            raise StoreError(msg)
        self.add_record(dataclasses.replace(current, **changes), replace=True)
        new = self.get_record(record_id)
        assert new is not None
        return new

    def get_record(self, record_id: str) -> SessionRecord | None:
        """The record ``record_id`` (a session UUID), if any."""
        return self.store._one(_record, "SELECT * FROM session_records WHERE id = ?", record_id)

    def list_records(
        self,
        *,
        run_id: str | None = None,
        epic: str | None = None,
        kind: RecordKind | None = None,
        newest_first: bool = False,
    ) -> list[SessionRecord]:
        """Records, filtered; oldest first unless ``newest_first``."""
        sql, args = where(run_id=run_id, epic=epic, kind=kind)
        order = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY COALESCE(finished, started, queued) {order}, queued {order}, id {order}"
        return self.store._all(_record, f"SELECT * FROM session_records{sql}", *args)

    def import_records(self, records: Iterable[SessionRecord]) -> tuple[int, int]:
        """Add records not already present; returns (added, skipped)."""
        added = skipped = 0
        for record in records:
            if self.add_record(record):
                added += 1
            else:
                skipped += 1
        return added, skipped


def _audit_fields(record: SessionRecord) -> dict[str, t.Any]:
    return {
        "record": record.id,
        "record_kind": record.kind,
        "run": record.run_id,
        "epic": record.epic,
        "item": record.item_id,
        "status": record.status,
        "commit_summary": record.commit_summary,
        "escalation": record.escalation,
        "error": record.error,
    }
