"""Small asyncio helpers shared by the layers."""

from __future__ import annotations

import asyncio
import contextlib
import typing as t

T = t.TypeVar("T")


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True if it was set.

    A negative bound is taken as zero (look once, do not wait).
    """
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def wait_any(*events: asyncio.Event, timeout: float | None = None) -> bool:
    """Wait until any of ``events`` is set, at most ``timeout`` seconds; True if one was."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    return bool(done)


async def finish(task: asyncio.Task[t.Any]) -> None:
    """Cancel ``task`` and wait until it ended; its outcome is dropped, a cancel of ours is not.

    ``with suppress(CancelledError): await task`` would also swallow a cancel of the caller
    that comes while it waits, and a caller's loop would then go on.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: a task's own failure is logged where it happens


def stop_if_cancelled() -> None:
    """Raise CancelledError when this task was cancelled, even if an await swallowed it.

    Python 3.11's ``asyncio.wait_for`` returns a result that arrived together with the
    cancel and drops the cancel; a loop that goes on after that never stops (a postman
    whose stop hung in its 5 s sleeps until pytest's timeout). The cancel count stays set.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def listen(listeners: list[T], listener: T) -> t.Callable[[], None]:
    """Add ``listener`` to ``listeners``; returns the function that removes it again.

    The remover may be called more than once (the second call does nothing).

    Examples
    --------
    >>> seen: list[object] = []
    >>> remove = listen(seen, print)
    >>> remove(); remove(); seen
    []
    """
    listeners.append(listener)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            listeners.remove(listener)

    return remove
