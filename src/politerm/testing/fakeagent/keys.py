"""Decode the bytes a terminal sends into keys, typed text and bracketed pastes.

The decoder is incremental: :meth:`KeyDecoder.feed` takes whatever ``read()`` returned
and yields the complete events, keeping a partial escape sequence or an unfinished
paste for the next call. While a paste is open, each chunk is searched once for the end
marker and moved into the paste buffer (only a 5-byte tail that might start the marker is
kept back), so a 1 MiB paste costs O(n), never O(n²).
"""

from __future__ import annotations

import enum
import typing as t

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"

# A CSI longer than this without a final byte is garbage, not a sequence still arriving.
_MAX_CSI = 32

_CSI_KEYS = {
    b"A": "up",
    b"B": "down",
    b"C": "right",
    b"D": "left",
    b"H": "home",
    b"F": "end",
    b"Z": "btab",
    b"3~": "delete",
    b"I": "focus-in",
    b"O": "focus-out",
}
_SS3_KEYS = {b"A": "up", b"B": "down", b"C": "right", b"D": "left", b"H": "home", b"F": "end"}
_CONTROL_KEYS = {
    0x0D: "enter",
    0x0A: "enter",
    0x7F: "backspace",
    0x08: "backspace",
    0x09: "tab",
    0x03: "ctrl-c",
    0x04: "ctrl-d",
}


class EventKind(str, enum.Enum):
    """What one decoded input event is."""

    TEXT = "text"
    PASTE = "paste"
    KEY = "key"


class InputEvent(t.NamedTuple):
    """One decoded input event.

    ``data`` holds the bytes for TEXT and PASTE; ``key`` names a KEY (``"enter"``,
    ``"esc"``, ``"up"``, ``"ctrl-c"``, ...).
    """

    kind: EventKind
    data: bytes = b""
    key: str = ""


class KeyDecoder:
    r"""Incremental decoder of terminal input.

    Examples
    --------
    >>> d = KeyDecoder()
    >>> [(e.kind.value, e.data, e.key) for e in d.feed(b"hi\x1b[200~a\x1b[B\nb")]
    [('text', b'hi', '')]
    >>> [(e.kind.value, e.data, e.key) for e in d.feed(b"\x1b[201~\r\x1b[A")]
    [('paste', b'a\x1b[B\nb', ''), ('key', b'', 'enter'), ('key', b'', 'up')]
    >>> d.feed(b"\x1b"), d.pending
    ([], True)
    >>> [e.key for e in d.flush()]
    ['esc']
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._paste: bytearray | None = None

    @property
    def pending(self) -> bool:
        """Whether a partial escape sequence waits for more bytes (not a paste)."""
        return self._paste is None and bool(self._buf)

    def feed(self, data: bytes) -> list[InputEvent]:
        """Add ``data`` and return every event it completes."""
        self._buf += data
        events: list[InputEvent] = []
        while self._buf:
            if self._paste is not None:
                if not self._take_paste(events):
                    break
            elif not self._take_one(events):
                break
        return events

    def flush(self) -> list[InputEvent]:
        """Give up waiting on a partial escape sequence: a lone ESC is the Esc key."""
        if self._paste is not None or not self._buf:
            return []
        rest = bytes(self._buf[1:])
        self._buf.clear()
        events = [InputEvent(EventKind.KEY, key="esc")]
        if rest:
            events += self.feed(rest)
            if self.pending:
                events += self.flush()
        return events

    def _take_paste(self, events: list[InputEvent]) -> bool:
        assert self._paste is not None
        end = self._buf.find(PASTE_END)
        if end < 0:
            # Keep only a tail that could be the start of the end marker.
            keep = len(PASTE_END) - 1
            if len(self._buf) > keep:
                cut = len(self._buf) - keep
                self._paste += self._buf[:cut]
                del self._buf[:cut]
            return False
        self._paste += self._buf[:end]
        del self._buf[: end + len(PASTE_END)]
        events.append(InputEvent(EventKind.PASTE, bytes(self._paste)))
        self._paste = None
        return True

    def _take_one(self, events: list[InputEvent]) -> bool:
        buf = self._buf
        b = buf[0]
        if b == 0x1B:
            return self._take_escape(events)
        if b < 0x20 or b == 0x7F:
            key = _CONTROL_KEYS.get(b, f"ctrl-{chr(b + 0x60)}" if b < 0x20 else "unknown")
            events.append(InputEvent(EventKind.KEY, key=key))
            del buf[:1]
            return True
        end = 1
        n = len(buf)
        while end < n and buf[end] >= 0x20 and buf[end] != 0x7F and buf[end] != 0x1B:
            end += 1
        events.append(InputEvent(EventKind.TEXT, bytes(buf[:end])))
        del buf[:end]
        return True

    def _take_escape(self, events: list[InputEvent]) -> bool:
        buf = self._buf
        if len(buf) < 2:
            return False
        second = buf[1]
        if second == ord("["):
            end = 2
            while end < len(buf) and not 0x40 <= buf[end] <= 0x7E:
                end += 1
            if end >= len(buf):
                if len(buf) > _MAX_CSI:
                    events.append(InputEvent(EventKind.KEY, key="unknown"))
                    del buf[:2]
                    return True
                return False
            body = bytes(buf[2 : end + 1])
            del buf[: end + 1]
            if body == b"200~":
                self._paste = bytearray()
                return True
            if body == b"201~":
                return True  # a stray end marker carries nothing
            key = _CSI_KEYS.get(body)
            if key is None and body[-1:] in (b"A", b"B", b"C", b"D"):
                key = _CSI_KEYS.get(body[-1:])  # modified arrows: ESC [ 1 ; 5 A
            events.append(InputEvent(EventKind.KEY, key=key or "unknown"))
            return True
        if second == ord("O"):
            if len(buf) < 3:
                return False
            key = _SS3_KEYS.get(bytes(buf[2:3]), "unknown")
            del buf[:3]
            events.append(InputEvent(EventKind.KEY, key=key))
            return True
        if second < 0x20:
            # ESC then a control byte (Esc, then Ctrl-C a moment later) is two keys;
            # meta+control combinations are rare enough to give up.
            del buf[:1]
            events.append(InputEvent(EventKind.KEY, key="esc"))
            return True
        del buf[:2]
        events.append(InputEvent(EventKind.KEY, key=f"alt-{chr(second)}"))
        return True
