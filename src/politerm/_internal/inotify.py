"""Linux inotify on the asyncio loop: a file-system watch that costs nothing while idle.

The kernel queues events on a file descriptor that the event loop watches with
``add_reader``: no thread, no timer, no wake-up until a watched file is written.
:func:`watch_dir` returns None where inotify cannot be had (not Linux, or the per-user
watch limit reached); callers fall back to another watcher then.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
import sys
import typing as t

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Callable, Collection

log = logging.getLogger(__name__)

# From <sys/inotify.h>: the changes that writing, creating or replacing a file makes.
IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    if not hasattr(libc, "inotify_init1"):
        return None
    return libc


def names_in(buf: bytes) -> tuple[set[str], bool]:
    """The file names in a buffer of inotify events, and whether the queue overflowed.

    Examples
    --------
    >>> ev = _HEADER.pack(1, IN_MODIFY, 0, 8) + b"a.db" + bytes(4)
    >>> names_in(ev + _HEADER.pack(-1, IN_Q_OVERFLOW, 0, 0))
    ({'a.db'}, True)
    """
    names: set[str] = set()
    overflow = False
    offset = 0
    while offset + _HEADER.size <= len(buf):
        _wd, mask, _cookie, length = _HEADER.unpack_from(buf, offset)
        offset += _HEADER.size
        raw = buf[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        if mask & IN_Q_OVERFLOW:
            overflow = True
        if raw:
            names.add(os.fsdecode(raw))
    return names, overflow


class DirWatch:
    """Calls ``on_change()`` in the event loop when a file named in ``names`` is written.

    Made by :func:`watch_dir`; :meth:`close` stops it.
    """

    def __init__(
        self,
        fd: int,
        loop: asyncio.AbstractEventLoop,
        names: Collection[str],
        on_change: Callable[[], None],
    ) -> None:
        self._fd = fd
        self._loop = loop
        self._names = frozenset(names)
        self._on_change = on_change
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            buf = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("inotify read failed: %s", exc)
            return
        seen, overflow = names_in(buf)
        # An overflowed queue lost events: count it as a change rather than miss one.
        if overflow or seen & self._names:
            self._on_change()

    def close(self) -> None:
        """Stop watching and close the descriptor."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


def watch_dir(
    directory: pathlib.Path, names: Collection[str], on_change: Callable[[], None]
) -> DirWatch | None:
    """Watch ``directory`` (not recursively) for writes to the files called ``names``.

    Returns None when inotify is not available here (the caller picks another watcher).
    Must be called from a running event loop.
    """
    libc = _libc()
    if libc is None:
        return None
    fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        log.info("inotify unavailable: %s", os.strerror(ctypes.get_errno()))
        return None
    wd = libc.inotify_add_watch(fd, os.fsencode(directory), _MASK)
    if wd < 0:
        err = ctypes.get_errno()
        os.close(fd)
        if err == errno.ENOENT:
            raise FileNotFoundError(err, os.strerror(err), str(directory))
        log.info("cannot watch %s with inotify: %s", directory, os.strerror(err))
        return None
    return DirWatch(fd, asyncio.get_running_loop(), names, on_change)
