"""The run store's foundation: one SQLite connection, short transactions, the audit log.

Each write method of the store is one short ``BEGIN IMMEDIATE`` transaction (or a part of an
open :meth:`StoreCore.batch`), so a ``kill -9`` at any point leaves either all of a call's
effect or none of it. After the commit, the call appends one line to the audit log.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sqlite3
import threading
import time
import typing as t

from politerm._internal import vault
from politerm.errors import StoreError
from politerm.redact import Redactor, map_strings
from politerm.store._tables import insert, update_set
from politerm.store.audit import AuditLog, audit_path_for
from politerm.store.db import connect, connect_existing, default_store_path, user_version

if t.TYPE_CHECKING:
    import types

R = t.TypeVar("R")


# Redactions remembered: at most this many texts, of at most this many characters in all.
_CACHE_SIZE = 2048
_CACHE_CHARS = 4 << 20


class _Redacting:
    """A connection whose writes have every secret in their text parameters redacted.

    Every write of the store goes through :meth:`StoreCore._writing`, which hands out this
    wrapper: no table, present or future, can store a secret by forgetting to redact it.
    Text that holds JSON is redacted value by value (a PEM block inside a JSON string has
    escaped newlines that the plain patterns would miss).
    """

    def __init__(self, conn: sqlite3.Connection, redact: t.Callable[[str], str]) -> None:
        self._conn = conn
        self._redact = redact

    def _param(self, value: t.Any) -> t.Any:
        return self._redact(value) if isinstance(value, str) else value

    def execute(self, sql: str, params: t.Any = ()) -> sqlite3.Cursor:
        if isinstance(params, dict):
            params = {k: self._param(v) for k, v in params.items()}
        else:
            params = tuple(self._param(v) for v in params)
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: t.Iterable[t.Sequence[t.Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, [tuple(self._param(v) for v in row) for row in rows])

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self._conn, name)


class _BatchedAudit:
    """The audit log, holding lines back while a batch is open (they follow its commit)."""

    def __init__(self, log: AuditLog, redact: t.Callable[[t.Any], t.Any]) -> None:
        self._log = log
        self._redact = redact
        self._held: list[tuple[str, dict[str, t.Any]]] | None = None

    @property
    def path(self) -> pathlib.Path:
        return self._log.path

    def append(self, kind: str, **fields: t.Any) -> None:
        fields = self._redact(fields)
        if self._held is not None:
            self._held.append((kind, fields))
        else:
            self._log.append(kind, **fields)

    def hold(self) -> None:
        self._held = []

    def drop(self) -> None:
        self._held = None

    def release(self) -> None:
        held, self._held = self._held or [], None
        self._log.append_many(held)  # a batch's lines in one write

    def close(self) -> None:
        self._log.close()


class StoreCore:
    """The connection, transactions and meta table under every part of the run store.

    :class:`~politerm.store.runstore.RunStore` adds the tables (one mixin per domain
    object); open it with :meth:`open`. One instance is safe to share between threads;
    several instances (and processes) may open one file.

    Parameters
    ----------
    conn
        A connection prepared by :func:`politerm.store.db.connect`.
    path
        The store file.
    clock
        Source of timestamps; tests pass a fake one.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: pathlib.Path,
        *,
        clock: t.Callable[[], float] = time.time,
    ) -> None:
        self._conn = conn
        self._path = path
        self._clock = clock
        self._lock = threading.RLock()
        self._redactor = Redactor()
        self._redacted: dict[str, tuple[str, dict[str, str]]] = {}
        self._cached_chars = 0
        self._keep: t.Callable[[dict[str, str]], None] | None = vault.keep
        self._audit = _BatchedAudit(AuditLog(audit_path_for(path)), self._redact_json)
        self._closed = False
        self._batch_depth = 0
        # Committed but not yet forced to disk (a batch(durable=False)); see sync().
        self._unsynced = False
        # An agents row's values -> its Agent: a view lists every agent on each refresh,
        # and only the rows that changed since need building again (see list_agents).
        self._agent_rows: dict[tuple[t.Any, ...], t.Any] = {}
        self.agents_built = 0
        """How many Agent objects the listings built (rows not seen unchanged before)."""

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: pathlib.Path | None = None, *, clock: t.Callable[[], float] = time.time
    ) -> t.Self:
        """Open the store at ``path``, creating and migrating it as needed.

        Parameters
        ----------
        path
            The SQLite file; :func:`politerm.store.db.default_store_path` when omitted.
        clock
            Source of timestamps (float epoch seconds).

        Returns
        -------
        RunStore
            (or the subclass it is called on)

        Raises
        ------
        SchemaTooNew
            The file was written by a newer politerm.
        StoreError
            The file is not a run store or cannot be opened.
        """
        path = pathlib.Path(path) if path is not None else default_store_path()
        return cls(connect(path), path, clock=clock)

    @classmethod
    def open_existing(cls, path: pathlib.Path) -> t.Self:
        """Open the store at ``path`` as it is, to read: never created, never migrated.

        How a view opens the stores of other projects (:func:`politerm.store.db.
        connect_existing`).

        Raises
        ------
        SchemaTooNew
            The file was written by a newer politerm.
        StoreError
            No store there, not a run store, or one of an older schema.
        """
        path = pathlib.Path(path)
        return cls(connect_existing(path), path)

    @property
    def path(self) -> pathlib.Path:
        """The store file."""
        return self._path

    @property
    def audit_path(self) -> pathlib.Path:
        """The JSONL audit log beside the store file."""
        return self._audit.path

    @property
    def schema_version(self) -> int:
        """The schema version of the open file (``PRAGMA user_version``)."""
        with self._reading():
            return user_version(self._conn)

    def close(self) -> None:
        """Close the connection and the audit log; further calls raise :class:`StoreError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._audit.close()

    def __enter__(self) -> t.Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._path)!r})"

    # --- redaction ------------------------------------------------------------------------

    def set_redaction(
        self,
        redactor: Redactor,
        keep: t.Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        """Redact with ``redactor`` (config patterns); hand each secret found to ``keep``.

        ``keep`` receives ``{tag: secret}`` for the secrets replaced by
        ``[REDACTED:kind#tag]`` markers: a vault that holds them outside the disk (the
        session's tmux server), so the agent a text was meant for still gets the original.
        """
        self._redactor = redactor
        self._keep = keep
        self._redacted.clear()
        self._cached_chars = 0

    @property
    def redactor(self) -> Redactor:
        """The patterns this store redacts with: the built-in ones and the config's."""
        return self._redactor

    def redact(self, text: str) -> str:
        """``text`` as the store keeps it: every secret replaced by a tagged marker."""
        # One write redacts the same short values (agent names, states, nonces) and the
        # same prompt (its row, the audit line, the event) again and again: each distinct
        # text is scanned once.
        hit = self._redacted.get(text)
        if hit is None:
            hit = self._redact_new(text)
            if len(self._redacted) >= _CACHE_SIZE or self._cached_chars > _CACHE_CHARS:
                self._redacted.clear()
                self._cached_chars = 0
            self._redacted[text] = hit
            self._cached_chars += len(text)
        out, found = hit
        if found and self._keep is not None:
            self._keep(found)
        return out

    def _redact_new(self, text: str) -> tuple[str, dict[str, str]]:
        if text.startswith(("{", "[")):
            try:
                value = json.loads(text)
            except ValueError:
                pass
            else:
                if isinstance(value, dict | list):
                    found: dict[str, str] = {}

                    def leaf(text: str) -> str:
                        out, more = self._redact_new(text)
                        found.update(more)
                        return out

                    red = map_strings(value, leaf)
                    # Unchanged JSON keeps its exact text (a body is delivered as written).
                    out = text if red == value else json.dumps(red, ensure_ascii=False)
                    return out, found
        return self._redactor.tagged(text)

    def _redact_json(self, value: t.Any) -> t.Any:
        return map_strings(value, self.redact)

    # --- transactions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> t.Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_open()
            try:
                yield self._conn
            except sqlite3.Error as e:
                msg = f"run store {self._path}: read failed: {e}"
                raise StoreError(msg) from e

    def _one(self, build: t.Callable[[sqlite3.Row], R], sql: str, *args: t.Any) -> R | None:
        """The first row ``sql`` reads, built by ``build``; None when it reads none."""
        with self._reading() as c:
            row = c.execute(sql, args).fetchone()
        return None if row is None else build(row)

    def _all(self, build: t.Callable[[sqlite3.Row], R], sql: str, *args: t.Any) -> list[R]:
        """Every row ``sql`` reads, each built by ``build``."""
        with self._reading() as c:
            rows = c.execute(sql, args).fetchall()
        return [build(r) for r in rows]

    def _change(self, build: t.Callable[[sqlite3.Row], R], what: str, sql: str, *args: t.Any) -> R:
        """Write with ``sql`` (``… RETURNING *``) and build the row; StoreError: no ``what``."""
        with self._writing() as c:
            row = c.execute(sql, args).fetchone()
        if row is None:
            msg = f"run store {self._path}: no {what}"
            raise StoreError(msg)
        return build(row)

    @contextlib.contextmanager
    def _writing(self) -> t.Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction (or a part of the open :meth:`batch`).

        IMMEDIATE takes the write lock up front, so a read-then-write (compare-and-set) in
        the block cannot be invalidated by another process between the two.
        """
        with self.batch():
            yield t.cast("sqlite3.Connection", _Redacting(self._conn, self.redact))

    @contextlib.contextmanager
    def batch(self, *, durable: bool = True) -> t.Iterator[None]:
        """Make every write inside one transaction: all of them commit, or none.

        The router writes one block's effects (forwarded message, task state, expectation,
        acknowledgement, end of turn) as one batch: one commit, one fsync, and after a
        ``kill -9`` either all of them are there or none. Audit lines are written after the
        commit; nested batches join the outer one (whose ``durable`` counts).

        Parameters
        ----------
        durable
            False commits without waiting for the disk (``synchronous = NORMAL`` for this
            commit only): the commit is visible to every process and survives a killed
            process at once, and survives power loss from the next durable commit or
            :meth:`sync` on. For a record of intent whose confirmation follows within
            moments (a prompt marked DELIVERING, then DELIVERED): the fsync moves off the
            path to the agent. The caller must make sure one of those follows.
        """
        with self._lock:
            self._check_open()
            if self._batch_depth:
                self._batch_depth += 1
                try:
                    yield
                finally:
                    self._batch_depth -= 1
                return
            try:
                if not durable:
                    # Only settable outside a transaction; FULL comes back after the commit.
                    self._conn.execute("PRAGMA synchronous = NORMAL")
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                self._restore_sync(durable)
                msg = f"run store {self._path}: cannot start a write: {e}"
                raise StoreError(msg) from e
            self._batch_depth = 1
            self._audit.hold()
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException as e:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                self._audit.drop()
                if isinstance(e, sqlite3.Error):
                    msg = f"run store {self._path}: write failed: {e}"
                    raise StoreError(msg) from e
                raise
            finally:
                self._batch_depth = 0
                self._restore_sync(durable)
            # A durable commit syncs the whole WAL, earlier undurable commits with it.
            self._unsynced = not durable
            self._audit.release()

    def _restore_sync(self, durable: bool) -> None:
        if not durable:
            self._conn.execute("PRAGMA synchronous = FULL")

    def sync(self) -> None:
        """Force the commits made with ``batch(durable=False)`` to disk (no-op if none).

        Raises
        ------
        StoreError
            The write-ahead log could not be synced.
        """
        with self._lock:
            if not self._unsynced:
                return
            self._check_open()
            wal = self._path.with_name(f"{self._path.name}-wal")
            try:
                fd = os.open(wal, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except FileNotFoundError:
                pass  # checkpointed and removed: its content is in the synced database
            except OSError as e:
                msg = f"run store {self._path}: cannot sync {wal.name}: {e}"
                raise StoreError(msg) from e
            self._unsynced = False

    def _check_open(self) -> None:
        if self._closed:
            msg = f"run store {self._path} is closed"
            raise StoreError(msg)

    def data_version(self) -> int:
        """A number that changes whenever another connection commits (``PRAGMA data_version``).

        The router checks it to notice new tasks, answers and aborts written by other
        ``poli`` processes without re-reading every table.
        """
        with self._reading() as conn:
            row = conn.execute("PRAGMA data_version").fetchone()
        return int(row[0])

    # --- meta -----------------------------------------------------------------------------

    def set_meta(self, key: str, value: str) -> None:
        """Set a free-form key to a string value."""
        with self._writing() as c:
            insert(c, "meta", {"key": key, "value": value}, update_set("key", ["value"]))
        self._audit.append("meta.set", key=key, value=value)

    def get_meta(self, key: str) -> str | None:
        """Return the value of ``key``, or None when unset."""
        with self._reading() as c:
            row = c.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta_values(self, prefix: str) -> dict[str, str]:
        """Every meta key that starts with ``prefix`` and its non-empty value, in one query.

        What a view that shows every agent reads instead of one :meth:`get_meta` per agent.
        """
        with self._reading() as c:
            # A range on the primary key: the index finds the prefix, nothing else is read.
            rows = c.execute(
                "SELECT key, value FROM meta WHERE key >= ? AND key < ? AND value != ''",
                (prefix, prefix + "\U0010ffff"),
            ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def meta_keys(self, prefix: str) -> list[str]:
        """Every meta key that starts with ``prefix`` and has a non-empty value, sorted."""
        return sorted(self.meta_values(prefix))
