"""Each pane's output as one control connection hears it: wake-up events, counts, subscribers.

:class:`politerm.tmux.control.ControlClient` reads ``%output`` off the wire and hands each
decoded chunk to :meth:`OutputFeeds.output`; everything that waits on a pane or follows its
output goes through the client's :attr:`~politerm.tmux.control.ControlClient.feeds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.tmux._wire import OutputCallback

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _PaneFeed:
    """Per-pane output bookkeeping: a counter, a wake-up event and subscribers."""

    seq: int = 0
    last_output: float = 0.0
    event: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    callbacks: list[OutputCallback] = dataclasses.field(default_factory=list)


class OutputFeeds:
    """The output of every pane on one control connection, for its waiters and subscribers.

    A waiter takes :meth:`event` *before* it looks at the pane's screen and waits on it
    after, so output arriving in between is not missed. :meth:`wake` sets a pane's event
    with no output (the pane died, a person scrolled, the connection dropped) so that its
    watcher looks again instead of sleeping to its timeout.

    Parameters
    ----------
    on_subscribers
        Called whenever the number of subscriptions (:attr:`subscribers`) changes.
    """

    def __init__(self, on_subscribers: Callable[[], None]) -> None:
        self._panes: dict[str, _PaneFeed] = {}
        self._on_subscribers = on_subscribers
        self.subscribers = 0

    def _feed(self, pane_id: str) -> _PaneFeed:
        feed = self._panes.get(pane_id)
        if feed is None:
            feed = self._panes[pane_id] = _PaneFeed()
        return feed

    def event(self, pane_id: str) -> asyncio.Event:
        """An event set at the pane's next output (or a wake-up): take it before looking."""
        return self._feed(pane_id).event

    def seq(self, pane_id: str) -> int:
        """Number of ``%output`` notifications seen for the pane so far."""
        return self._feed(pane_id).seq

    def last(self, pane_id: str) -> float:
        """``time.monotonic()`` of the pane's last output, 0.0 if none yet."""
        return self._feed(pane_id).last_output

    async def wait(self, pane_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the pane's next output; True if it came."""
        event = self.event(pane_id)
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def subscribe(self, pane_id: str, callback: OutputCallback) -> Callable[[], None]:
        """Call ``callback(pane_id, data)`` with each decoded output chunk of the pane.

        Returns a function that removes the subscription. On a quiet client
        (:meth:`~politerm.tmux.control.ControlClient.quiet`), tmux sends output again from
        the first subscription on (asked before any command sent after this call) until the
        last one is removed.
        """
        feed = self._feed(pane_id)
        feed.callbacks.append(callback)
        self.subscribers += 1
        self._on_subscribers()
        removed = False

        def unsubscribe() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            with contextlib.suppress(ValueError):
                feed.callbacks.remove(callback)
            self.subscribers -= 1
            self._on_subscribers()

        return unsubscribe

    def output(self, pane_id: str, data: bytes) -> None:
        """The pane wrote ``data``: count it, wake its waiters, hand it to its subscribers."""
        feed = self._feed(pane_id)
        feed.seq += 1
        feed.last_output = time.monotonic()
        self.wake(pane_id)
        for cb in list(feed.callbacks):
            try:
                cb(pane_id, data)
            except Exception:
                log.exception("output subscriber failed for %s", pane_id)

    def wake(self, pane_id: str) -> None:
        """Set the pane's event with no output: its watcher looks again."""
        feed = self._feed(pane_id)
        feed.event.set()
        feed.event = asyncio.Event()

    def wake_all(self) -> None:
        """Wake every pane's watcher (panes may be gone or moved, or the connection dropped)."""
        for pane_id in list(self._panes):
            self.wake(pane_id)
