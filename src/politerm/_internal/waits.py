"""Bounded, event-driven waits on files (watchfiles) and processes (pidfd)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import typing as t

from politerm._internal.aio import wait_event
from politerm.errors import PolitermError

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import AsyncIterator, Callable

T = t.TypeVar("T")

BACKSTOP: t.Final = 1.0
"""Re-check this often even without an event (covers the watcher's start-up window)."""


@contextlib.asynccontextmanager
async def poked_by(
    dirs: t.Sequence[pathlib.Path], pids: t.Sequence[int] = ()
) -> AsyncIterator[asyncio.Event]:
    """An event set by every change under ``dirs`` and by the exit of any of ``pids``."""
    poke = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    # Imported here: the views read :func:`pid_alive` only, and watchfiles pulls anyio.
    import watchfiles

    async def watch() -> None:
        async for _changes in watchfiles.awatch(
            *dirs, stop_event=stop, debounce=20, step=10, recursive=False
        ):
            poke.set()

    watcher = asyncio.create_task(watch())
    pidfds: list[int] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            poke.set()  # already gone: look now
            continue
        pidfds.append(fd)
        loop.add_reader(fd, poke.set)
    try:
        yield poke
    finally:
        stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        for fd in pidfds:
            loop.remove_reader(fd)
            os.close(fd)


async def wait_until(
    check: Callable[[], T | None],
    *,
    dirs: t.Sequence[pathlib.Path],
    pids: t.Sequence[int] = (),
    timeout: float,
    what: str,
    error: type[PolitermError] = PolitermError,
) -> T:
    """Return ``check()``'s first non-None value, re-checking on every file or process event.

    Raises
    ------
    PolitermError
        (``error``) ``timeout`` seconds passed; the message says what was awaited.
    """
    deadline = time.monotonic() + timeout
    async with poked_by(dirs, pids) as poke:
        while True:
            poke.clear()
            value = check()
            if value is not None:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                msg = f"timed out after {timeout:g} s waiting for {what}"
                raise error(msg)
            await wait_event(poke, min(left, BACKSTOP))


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:  # noqa: PTH123
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
