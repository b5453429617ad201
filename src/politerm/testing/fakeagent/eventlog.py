"""The fake agent's JSONL event log, and helpers that read it back byte-exact.

One JSON object per line, written with a single ``write()`` per line (nothing buffered),
file mode 0600 because prompts may carry secrets. Prompt bytes are decoded UTF-8 with
``surrogateescape`` and JSON-encoded with ASCII escapes, so invalid UTF-8 survives the
round trip: :func:`prompts` returns exactly the bytes the agent received.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import typing as t


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` in hex, as the log records pastes and prompts.

    Examples
    --------
    >>> sha256_hex(b"")[:8]
    'e3b0c442'
    """
    import hashlib  # OpenSSL's import costs every agent's start; most never get a prompt

    return hashlib.sha256(data).hexdigest()


def encode_bytes(data: bytes) -> str:
    r"""Bytes → str that JSON keeps and :func:`decode_text` turns back into the bytes.

    Examples
    --------
    >>> encode_bytes(b"ok \xff")
    'ok \udcff'
    """
    return data.decode("utf-8", "surrogateescape")


def decode_text(text: str) -> bytes:
    r"""Inverse of :func:`encode_bytes`.

    Examples
    --------
    >>> decode_text(encode_bytes(b"\x1b[2J\xfe\n"))
    b'\x1b[2J\xfe\n'
    """
    return text.encode("utf-8", "surrogateescape")


class EventLog:
    """Append-only JSONL log; a no-op when ``path`` is ``None``."""

    def __init__(self, path: str | pathlib.Path | None) -> None:
        self.path = pathlib.Path(path) if path is not None else None
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.fchmod(self._fd, 0o600)  # an existing file keeps its mode otherwise

    def write(self, event: str, **fields: t.Any) -> None:
        """Append one event line, immediately."""
        if self._fd is None:
            return
        record = {"ts": time.time(), "event": event, **fields}
        line = json.dumps(record, ensure_ascii=True) + "\n"
        os.write(self._fd, line.encode("ascii"))

    def prompt(self, data: bytes, n: int, **fields: t.Any) -> None:
        """Log a submitted prompt byte-exact (text, length, sha256, counter)."""
        self.write(
            "prompt",
            n=n,
            len=len(data),
            sha256=sha256_hex(data),
            text=encode_bytes(data),
            **fields,
        )

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_log(path: str | pathlib.Path) -> list[dict[str, t.Any]]:
    r"""Every event of a log, in order; a torn last line (agent killed mid-write) is skipped.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     log = EventLog(pathlib.Path(d) / "log.jsonl")
    ...     log.prompt(b"hi\n", 1)
    ...     [(e["event"], e["len"]) for e in read_log(log.path)]
    [('prompt', 3)]
    """
    events: list[dict[str, t.Any]] = []
    for line in pathlib.Path(path).read_text("ascii").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def prompts(path: str | pathlib.Path) -> list[bytes]:
    r"""The exact bytes of every prompt the agent received, in order.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     log = EventLog(pathlib.Path(d) / "log.jsonl")
    ...     log.prompt(b"a\xff\x1b", 1)
    ...     prompts(log.path)
    [b'a\xff\x1b']
    """
    return [decode_text(e["text"]) for e in read_log(path) if e.get("event") == "prompt"]
