"""Small asyncio helpers shared by the layers."""

from __future__ import annotations

import asyncio


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
