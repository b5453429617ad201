"""Private staging files for paste buffers: RAM-backed, 0600, gone right after the load.

tmux reads a paste buffer from a file named over the control connection (``load-buffer
-b NAME PATH``), so no ``tmux`` process is spawned per prompt and the text never appears on
a command line. The file lives in a 0700 directory of this process, on ``/dev/shm`` when
there is one (memory, not disk: a secret in a prompt is never written to a disk), and is
removed as soon as tmux has read it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import secrets
import shutil
import tempfile
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Iterator

_DIR: pathlib.Path | None = None


def _base() -> str | None:
    for candidate in ("/dev/shm", os.environ.get("XDG_RUNTIME_DIR", "")):
        if candidate and pathlib.Path(candidate).is_dir() and os.access(candidate, os.W_OK):
            return candidate
    return None  # the system temp dir


def staging_dir() -> pathlib.Path:
    """The private staging directory of this process (mode 0700, removed at exit)."""
    global _DIR  # one directory per process, made on first use
    if _DIR is None or not _DIR.is_dir():
        # mkdtemp creates it 0700 whatever the umask.
        _DIR = pathlib.Path(tempfile.mkdtemp(prefix=f"poli-{os.getpid()}-", dir=_base()))
        atexit.register(shutil.rmtree, _DIR, True)
    return _DIR


@contextlib.contextmanager
def staged(data: bytes) -> Iterator[pathlib.Path]:
    """A private file holding ``data`` for the duration of the block, then removed.

    Examples
    --------
    >>> with staged(b"hello") as path:
    ...     path.read_bytes(), oct(path.stat().st_mode & 0o777)
    (b'hello', '0o600')
    >>> path.exists()
    False
    """
    path = staging_dir() / secrets.token_hex(8)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
