"""Store changes as events: inotify on the store's files, confirmed by ``PRAGMA data_version``.

The dashboard, the web monitor and the notifier react when another process commits to the
run store. They must not poll for it: the store's directory is watched with inotify (its fd
sits in the asyncio loop, so an idle store costs no wake-up at all), and only after the
kernel reports a write to the store or its WAL is SQLite asked whether a commit happened.
Where inotify is missing (not Linux), :mod:`watchfiles` watches instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import pathlib
import struct
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from politerm.store import RunStore

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_EVENT = struct.Struct("iIII")


def _libc() -> t.Any:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name, use_errno=True)
    return lib if hasattr(lib, "inotify_init1") else None


class _Inotify:
    """A directory watch whose fd wakes the asyncio loop; calls ``on_event(name)``."""

    def __init__(self, directory: pathlib.Path, on_event: Callable[[str], None]) -> None:
        lib = _libc()
        if lib is None:
            msg = "inotify is not available"
            raise OSError(msg)
        self.fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        mask = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
        if lib.inotify_add_watch(self.fd, os.fsencode(directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"cannot watch {directory}")
        self.on_event = on_event
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(self.fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT.size <= len(data):
            _, _, _, length = _EVENT.unpack_from(data, offset)
            raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            self.on_event(os.fsdecode(raw.rstrip(b"\0")))

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        os.close(self.fd)


class StoreWatcher:
    """Yields once per batch of commits other connections made to ``store``.

    The watch is in place as soon as :meth:`start` returns (or the first iteration of
    :meth:`changes` begins), so a commit made right after that is never missed.

    Parameters
    ----------
    store
        The open run store; its ``data_version`` confirms a commit.
    debounce
        Seconds to let a burst of writes settle into one wake-up.
    """

    def __init__(self, store: RunStore, *, debounce: float = 0.02) -> None:
        self.store = store
        self.debounce = debounce
        self.wakeups = 0
        self._names = {store.path.name, f"{store.path.name}-wal", f"{store.path.name}-journal"}
        self._touched = asyncio.Event()
        self._stopped = asyncio.Event()
        self._inotify: _Inotify | None = None
        self._fallback: asyncio.Task[None] | None = None
        self._seen: int | None = None

    def start(self) -> None:
        """Put the watch in place (idempotent)."""
        if self._seen is not None:
            return
        self._seen = self.store.data_version()
        try:
            self._inotify = _Inotify(self.store.path.parent, self._on_event)
        except OSError:
            self._fallback = asyncio.create_task(self._watchfiles())

    def _on_event(self, name: str) -> None:
        if name in self._names:
            self._touched.set()

    async def _watchfiles(self) -> None:
        import watchfiles

        async for _ in watchfiles.awatch(
            self.store.path.parent, stop_event=self._stopped, recursive=False, debounce=50
        ):
            self._touched.set()

    def stop(self) -> None:
        """End :meth:`changes` and release the watch."""
        self._stopped.set()
        self._touched.set()
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        if self._fallback is not None:
            self._fallback.cancel()

    async def changes(self) -> AsyncIterator[int]:
        """Each new ``data_version`` after a commit by another connection."""
        self.start()
        while not self._stopped.is_set():
            await self._touched.wait()
            if self._stopped.is_set():
                return
            await asyncio.sleep(self.debounce)  # one wake-up for a burst of writes
            self._touched.clear()
            self.wakeups += 1
            version = self.store.data_version()
            if version != self._seen:
                self._seen = version
                yield version


@contextlib.asynccontextmanager
async def watching(
    store: RunStore, on_change: Callable[[], t.Awaitable[None] | None]
) -> AsyncIterator[StoreWatcher]:
    """Run ``on_change`` after each foreign commit while the ``async with`` body runs."""
    watcher = StoreWatcher(store)
    watcher.start()

    async def run() -> None:
        async for _ in watcher.changes():
            result = on_change()
            if result is not None:
                await result

    task = asyncio.create_task(run(), name="poli-store-watch")
    try:
        yield watcher
    finally:
        watcher.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
