"""An operator's say over a running agent: wrap up (a soft stop), or abort.

A workflow that runs an agent in the operator's foreground (``poli go``) hands its
:class:`StopControl` to :func:`~politerm.driver.turn.run_turn`: the first request (Ctrl-C)
has the turn deliver its wrap-up note and wait a grace period for the answer; the second
(or SIGTERM, :meth:`StopControl.abort`) ends the turn at once.
"""

from __future__ import annotations

import asyncio
import typing as t

from politerm._internal.aio import listen

if t.TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


class StopControl:
    """Operator stop requests: the first is a soft stop, the second (or :meth:`abort`) aborts.

    Examples
    --------
    >>> stop = StopControl()
    >>> stop.request(); (stop.soft, stop.aborted)
    (True, False)
    >>> stop.request(); stop.request(); (stop.level, stop.aborted)
    (2, True)
    """

    def __init__(self) -> None:
        self.level = 0
        self._listeners: list[Callable[[], None]] = []

    @property
    def soft(self) -> bool:
        """A soft stop (or more) was asked for."""
        return self.level >= 1

    @property
    def aborted(self) -> bool:
        """An abort was asked for."""
        return self.level >= 2

    def request(self) -> None:
        """One Ctrl-C: soft stop the first time, abort the second."""
        self.level = min(self.level + 1, 2)
        self._notify()

    def abort(self) -> None:
        """Abort at once (SIGTERM)."""
        self.level = 2
        self._notify()

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every request; returns a remover."""
        return listen(self._listeners, callback)

    def _notify(self) -> None:
        for cb in list(self._listeners):
            cb()

    async def unless_aborted(self, coro: Coroutine[t.Any, t.Any, object]) -> bool:
        """Run ``coro``, but cancel it as soon as an abort is requested; False if it was."""
        if self.aborted:
            coro.close()
            return False
        task = asyncio.ensure_future(coro)

        def on_request() -> None:
            if self.aborted:
                task.cancel()

        remove = self.listen(on_request)
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.aborted or (current is not None and current.cancelling()):
                raise  # the caller itself was cancelled
            return False
        finally:
            remove()
        return True
