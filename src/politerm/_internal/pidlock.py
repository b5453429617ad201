"""One holder at a time: an exclusive ``flock`` (a dead holder's is free) on a private file."""

from __future__ import annotations

import fcntl
import os
import typing as t

from politerm._internal.private import private_dir

if t.TYPE_CHECKING:
    import pathlib


def try_flock(path: pathlib.Path) -> int | None:
    """Open ``path`` (0600, its folders 0700) and lock it without waiting: its fd, or None."""
    private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class PidLock:
    """An exclusive lock file holding its holder's pid (a router's, a postman's)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock without waiting; False if another process holds it."""
        fd = try_flock(self.path)
        if fd is None:
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> int | None:
        """PID of the process holding the lock, if one does (never a dead one's)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None
        try:
            os.kill(int(text), 0)
        except ProcessLookupError:
            return None  # left by a holder killed with -9: the lock is free
        except PermissionError:
            pass  # alive, another user's
        return int(text)

    def release(self) -> None:
        """Give the lock up; the file no longer names this process."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Remove the lock file (of a session that is gone), unless someone still holds it."""
        if self.path.exists() and self.acquire():
            self.path.unlink(missing_ok=True)
            self.release()
