"""The session's private message directory: request, body and response files.

Files are created 0600 inside a 0700 directory that belongs to one politerm session (not a
shared world-readable ``/tmp`` folder), written to a temporary name and renamed, so a reader
never sees half a file. Every path that arrives from outside (a notification line, ``poli
reply FILE``) is resolved and checked to lie inside the directory before it is read.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import secrets
import typing as t

from politerm._internal.private import private_dir, write_private
from politerm.errors import UnsafeMessagePath

if t.TYPE_CHECKING:
    from politerm.config import Config


def message_dir_for(config: Config) -> pathlib.Path:
    """Where one session's messages live: beside its run store, named by socket and session.

    Examples
    --------
    >>> from politerm.config import Config, StoreConfig
    >>> cfg = Config(store=StoreConfig(path=pathlib.Path("/s/runs.sqlite3")))
    >>> str(message_dir_for(cfg))
    '/s/messages/poli-poli'
    """
    store = config.store.resolved_path()
    return store.parent / "messages" / f"{config.tmux.socket}-{config.tmux.session}"


def new_message_id() -> str:
    """A fresh, unguessable message id such as ``m-3f9c0a1b2c4d``.

    Examples
    --------
    >>> len(new_message_id()), new_message_id().startswith("m-")
    (14, True)
    """
    return "m-" + secrets.token_hex(6)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` as hex.

    Examples
    --------
    >>> sha256_hex(b"")[:12]
    'e3b0c44298fc'
    """
    return hashlib.sha256(data).hexdigest()


class MessageDir:
    """One session's private message directory.

    Parameters
    ----------
    path
        The directory; created 0700 on first use (missing parents too).
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"MessageDir({str(self.path)!r})"

    def ensure(self) -> pathlib.Path:
        """Create the directory (0700) if needed and return its resolved path."""
        private_dir(self.path)
        self.path.chmod(0o700)
        return self.path.resolve()

    def file(self, name: str) -> pathlib.Path:
        """The path of ``name`` inside the directory (``name`` is one path component)."""
        if not name or "/" in name or name in (".", ".."):
            msg = f"message file name {name!r} is not a plain file name"
            raise UnsafeMessagePath(msg)
        return self.ensure() / name

    def write(self, name: str, data: bytes) -> pathlib.Path:
        """Write ``data`` to ``name`` atomically (0600); return the path."""
        path = self.file(name)
        write_private(path, data)
        return path

    def check(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Resolve ``path`` (relative paths are taken inside the directory) and prove it is in.

        Raises
        ------
        UnsafeMessagePath
            The path, after following symlinks, is outside the directory, or is not a file.
        """
        root = self.ensure()
        raw = pathlib.Path(path)
        candidate = (raw if raw.is_absolute() else root / raw).resolve()
        if candidate.parent != root:
            msg = f"{path}: not inside the session's message directory {root}"
            raise UnsafeMessagePath(msg)
        if not candidate.is_file():
            msg = f"{path}: no such message file in {root}"
            raise UnsafeMessagePath(msg)
        return candidate

    def read(self, path: str | os.PathLike[str]) -> bytes:
        """The bytes of a message file, after :meth:`check`."""
        return self.check(path).read_bytes()
