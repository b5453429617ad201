"""The fake agent's input box: typed text and pastes, until Enter submits them.

Kept apart from the event loop because it is pure data: what the box holds, how it is
shown (big pastes as markers, controls escaped) and how the editing keys change it.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.testing.fakeagent.text import sanitize

DISPLAY_MAX_BYTES = 8000  # the live input box shows at most this much of the input's tail


@dataclasses.dataclass
class Part:
    """A piece of the input: typed text, or one paste (maybe shown as a marker)."""

    data: bytearray
    marker: str | None = None


class InputBox:
    r"""What the user has typed or pasted and not yet submitted.

    Parameters
    ----------
    paste_marker
        Given a paste and its 1-based number, the marker the CLI shows instead of the
        text (e.g. ``[Pasted text #1 +40 lines]``), or ``None`` to show it as typed.

    Examples
    --------
    >>> box = InputBox(lambda data, n: None)
    >>> box.type(b"hi "); box.paste(b"there\x1b")
    >>> box.data(), box.display()
    (b'hi there\x1b', 'hi there^[')
    >>> box.backspace(); box.data()
    b'hi there'
    >>> box.clear(), box.empty
    (b'hi there', True)
    """

    def __init__(self, paste_marker: t.Callable[[bytes, int], str | None]) -> None:
        self._paste_marker = paste_marker
        self.parts: list[Part] = []
        self.paste_count = 0
        # Ctrl-A moves the (imagined) cursor to the start, so a following Ctrl-K kills all.
        self.cursor_home = False

    @property
    def empty(self) -> bool:
        """True when nothing is in the box."""
        return not self.parts

    def type(self, data: bytes) -> None:
        """Append typed text."""
        self.cursor_home = False
        if not self.parts or self.parts[-1].marker is not None:
            self.parts.append(Part(bytearray()))
        self.parts[-1].data += data

    def paste(self, data: bytes) -> None:
        """Append one bracketed paste (shown as a marker when the CLI collapses it)."""
        self.cursor_home = False
        marker = self._paste_marker(data, self.paste_count + 1)
        if marker is not None:
            self.paste_count += 1
            self.parts.append(Part(bytearray(data), marker))
        else:
            self.type(data)

    def backspace(self) -> None:
        """Delete the last character (a whole collapsed paste at once)."""
        if not self.parts:
            return
        last = self.parts[-1]
        if last.marker is None and last.data:
            end = len(last.data) - 1
            while end > 0 and 0x80 <= last.data[end] < 0xC0:
                end -= 1  # drop a whole UTF-8 character
            del last.data[end:]
        if last.marker is not None or not last.data:
            self.parts.pop()

    def clear(self) -> bytes:
        """Empty the box; return what it held."""
        data = self.data()
        self.parts.clear()
        self.cursor_home = False
        return data

    def data(self) -> bytes:
        """The exact bytes in the box."""
        return b"".join(bytes(p.data) for p in self.parts)

    def display(self, limit: int = DISPLAY_MAX_BYTES, *, head: bool = False) -> str:
        """The input as shown: markers for big pastes, controls escaped.

        Only ``limit`` bytes are decoded (the tail for the live box, the head for the
        transcript echo), so a huge unmarked paste costs nothing per frame.
        """
        parts = self.parts if head else self.parts[::-1]
        pieces: list[str] = []
        budget = limit
        for part in parts:
            if budget <= 0:
                pieces.append("…")
                break
            if part.marker is not None:
                pieces.append(part.marker)
                budget -= len(part.marker)
                continue
            data = part.data
            cut = len(data) > budget
            if cut:
                data = data[:budget] if head else data[-budget:]
            text = sanitize(bytes(data).decode("utf-8", "replace"))
            pieces.append(text + "…" if cut and head else "…" + text if cut else text)
            budget -= len(data)
        return "".join(pieces if head else pieces[::-1])
