"""Bounded waiting for tests and scripts: never a bare sleep."""

from __future__ import annotations

import asyncio
import time
import typing as t

T = t.TypeVar("T")


class WaitTimeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited."""


def retry_until(
    fn: t.Callable[[], T | bool | None],
    seconds: float,
    *,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``fn`` until it returns a truthy value or ``seconds`` pass.

    Parameters
    ----------
    fn
        Checked repeatedly; its first truthy result is returned.
    seconds
        Upper bound on the whole wait.
    interval
        Pause between checks.
    what
        Named in the timeout message.

    Raises
    ------
    WaitTimeout
        When ``fn`` stayed falsy for ``seconds``.

    Examples
    --------
    >>> retry_until(lambda: 42, 1.0)
    42
    """
    deadline = time.monotonic() + seconds
    last: T | bool | None = None
    while True:
        last = fn()
        if last:
            return t.cast("T", last)
        if time.monotonic() >= deadline:
            msg = f"timed out after {seconds:g}s waiting for {what} (last: {last!r})"
            raise WaitTimeout(msg)
        time.sleep(interval)


async def aretry_until(
    fn: t.Callable[[], t.Awaitable[T | bool | None]],
    seconds: float,
    *,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Async twin of :func:`retry_until` for awaitable checks."""
    deadline = time.monotonic() + seconds
    last: T | bool | None = None
    while True:
        last = await fn()
        if last:
            return t.cast("T", last)
        if time.monotonic() >= deadline:
            msg = f"timed out after {seconds:g}s waiting for {what} (last: {last!r})"
            raise WaitTimeout(msg)
        await asyncio.sleep(interval)
