"""The fenced-report stream of an agent's raw output (see :meth:`AgentDriver.reports`)."""

from __future__ import annotations

import codecs
import typing as t

from politerm.protocol.report import ReportParser
from politerm.tmux.pane import Pane

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.protocol.report import ReportSignal
    from politerm.pty.runner import PtyTerminal


class ReportStream:
    """The agent's raw output fed to a :class:`~politerm.protocol.report.ReportParser`.

    Subscribes at construction; :meth:`close` unsubscribes. ``signals`` collects reports and
    report errors as they complete; ``on_text`` (optional) sees the decoded text first (the
    epic transcript writer).
    """

    def __init__(
        self,
        term: Pane | PtyTerminal,
        session_id: str,
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.parser = ReportParser(session_id)
        self.signals: list[ReportSignal] = []
        self.on_text = on_text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if isinstance(term, Pane):
            self._unsubscribe = term.client.subscribe(
                term.pane_id, lambda _pane, data: self._feed(data)
            )
        else:
            self._unsubscribe = term.subscribe(self._feed)

    def _feed(self, data: bytes) -> None:
        self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        """Feed decoded output (also the decoder's tail at the end)."""
        if self.on_text is not None:
            self.on_text(text)
        self.signals.extend(self.parser.feed(text))

    def flush(self) -> None:
        """Feed what the decoder still holds (the agent exited)."""
        self.feed_text(self._decoder.decode(b"", final=True))

    def close(self) -> None:
        """Stop listening."""
        self._unsubscribe()
