"""Append-only JSONL audit log kept beside the run store.

One line per state-changing store call, written after its transaction commits. The database
is the source of truth; the log is for people reading what happened, in order, after the
fact. A process killed between commit and append loses that one line, never a database row.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import time
import typing as t

from politerm.errors import StoreError
from politerm.store.db import FILE_MODE

log = logging.getLogger(__name__)

AUDIT_SUFFIX: t.Final = ".audit.jsonl"


def audit_path_for(store_path: pathlib.Path) -> pathlib.Path:
    """Return the audit log path that belongs to a store file.

    Examples
    --------
    >>> audit_path_for(pathlib.Path("/tmp/runs.sqlite3")).as_posix()
    '/tmp/runs.sqlite3.audit.jsonl'
    """
    return store_path.with_name(store_path.name + AUDIT_SUFFIX)


def encode_record(kind: str, fields: t.Mapping[str, t.Any], *, ts: float) -> bytes:
    r"""Serialise one audit record as a single newline-terminated UTF-8 line.

    Examples
    --------
    >>> encode_record("meta.set", {"key": "k", "value": "a\nb"}, ts=1.5)
    b'{"ts": 1.5, "kind": "meta.set", "key": "k", "value": "a\\nb"}\n'
    """
    record: dict[str, t.Any] = {"ts": ts, "kind": kind}
    record.update(fields)
    # json escapes newlines inside strings, so one record is always exactly one line.
    return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")


class AuditLog:
    """Appends records to one JSONL file, creating it with mode 0600.

    Parameters
    ----------
    path
        The log file; see :func:`audit_path_for`.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def append(self, kind: str, **fields: t.Any) -> None:
        """Append one record ``{"ts", "kind", **fields}``.

        A failure to write is logged, not raised: the caller's transaction has already
        committed, and reporting it as failed would invite a second, duplicate attempt.
        """
        self.append_many([(kind, fields)])

    def append_many(self, records: t.Sequence[tuple[str, t.Mapping[str, t.Any]]]) -> None:
        """Append several records (kind, fields) with one ``write()``, in order."""
        if not records:
            return
        now = time.time()
        line = b"".join(encode_record(kind, fields, ts=now) for kind, fields in records)
        with self._lock:
            try:
                if self._fd is None:
                    # O_APPEND: concurrent writers (router and CLI) each land whole lines at
                    # the end; a single write() of lines is not interleaved with another.
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
                os.write(self._fd, line)
            except OSError as e:
                log.warning("could not append to audit log %s: %s", self.path, e)

    def close(self) -> None:
        """Close the file; a later :meth:`append` reopens it."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def iter_audit(path: pathlib.Path) -> t.Iterator[dict[str, t.Any]]:
    """Yield the records of an audit log in the order they were written.

    Parameters
    ----------
    path
        The audit log file, or the store file it belongs to.

    Yields
    ------
    dict
        One record per line, each with at least ``ts`` and ``kind``.

    Raises
    ------
    StoreError
        A complete line is not a JSON object; the message names file and line. A final line
        without its newline (a writer killed mid-append) is skipped instead.
    """
    if not path.name.endswith(AUDIT_SUFFIX):
        path = audit_path_for(path)
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as e:
        msg = f"cannot read audit log {path}: {e.strerror or e}"
        raise StoreError(msg) from e
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                return
            try:
                record = json.loads(raw)
            except ValueError as e:
                msg = f"{path}:{lineno}: malformed audit record: {e}"
                raise StoreError(msg) from e
            if not isinstance(record, dict):
                msg = f"{path}:{lineno}: audit record is not a JSON object"
                raise StoreError(msg)
            yield record
