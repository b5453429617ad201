"""The agent's raw output as text: a tap (a transcript) and the fenced-report stream.

See :meth:`AgentDriver.output` and :meth:`AgentDriver.reports`.
"""

from __future__ import annotations

import codecs
import typing as t

from politerm.protocol.report import ReportParser

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.protocol.report import ReportSignal
    from politerm.terminal import Terminal


def tap(term: Terminal, on_text: Callable[[str], None]) -> Callable[[], None]:
    """Send the program's output, decoded as it arrives, to ``on_text``; returns a remover.

    The remover sends what the decoder still holds (a character cut at the end) first.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(data: bytes) -> None:
        on_text(decoder.decode(data))

    unsubscribe = term.subscribe(feed)

    def remove() -> None:
        unsubscribe()
        tail = decoder.decode(b"", final=True)
        if tail:
            on_text(tail)

    return remove


class ReportStream:
    """The agent's raw output fed to a :class:`~politerm.protocol.report.ReportParser`.

    Subscribes at construction; :meth:`close` unsubscribes. ``signals`` collects reports and
    report errors as they complete; ``on_text`` (optional) sees the decoded text first (the
    epic transcript writer).
    """

    def __init__(
        self,
        term: Terminal,
        session_id: str,
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.parser = ReportParser(session_id)
        self.signals: list[ReportSignal] = []
        self.on_text = on_text
        self._remove: Callable[[], None] | None = tap(term, self.feed_text)

    def feed_text(self, text: str) -> None:
        """Feed decoded output (also the decoder's tail at the end)."""
        if self.on_text is not None:
            self.on_text(text)
        self.signals.extend(self.parser.feed(text))

    def flush(self) -> None:
        """Stop listening, feeding what the decoder still holds first (the agent exited)."""
        self.close()

    def close(self) -> None:
        """Stop listening."""
        if self._remove is not None:
            self._remove()
            self._remove = None
