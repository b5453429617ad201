"""Agent text shown in a terminal: control sequences escaped, never interpreted.

An agent (or a file it wrote) can print OSC 52 (write the clipboard), OSC 0 (retitle the
window), ``ESC[2J`` (clear the screen) or a bare carriage return that hides what came before.
politerm shows such text as visible escapes. Plain SGR colour (``ESC[…m``) may be kept when the
output is a colour terminal; everything else — and SGR too when colour is off — is escaped.

:func:`escape_controls` works on one text; :class:`SafeStream` wraps ``sys.stdout`` /
``sys.stderr`` for the whole CLI, so that no command can print agent text raw by mistake.
Only code that draws politerm's own live display (``rich.live``) writes through
:meth:`SafeStream.trusted`, and it sanitizes the agent text it draws first.
"""

from __future__ import annotations

import contextlib
import os
import re
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Iterator

# SGR: CSI with only digits and semicolons/colons, ending in "m".
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# A whole escape sequence, so that it is shown escaped as one piece: CSI, OSC/DCS/APC/PM/SOS
# strings (to BEL or ST), two-character escapes; then any other C0/C1 control or DEL.
_SEQ = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def _visible(seq: str) -> str:
    out: list[str] = []
    for ch in seq:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def escape_controls(text: str, *, keep_sgr: bool = False) -> str:
    r"""Show every control sequence in ``text`` as visible escapes.

    Newlines and tabs stay; ``\r\n`` stays a line end; plain SGR colour stays when
    ``keep_sgr``.

    Parameters
    ----------
    text
        Text that an agent (or a person) wrote.
    keep_sgr
        Keep ``ESC[…m`` colour sequences (the output is a colour terminal).

    Returns
    -------
    str
        The text, safe to write to a terminal.

    Examples
    --------
    >>> escape_controls("title \x1b]0;pwned\x07 done")
    'title \\x1b]0;pwned\\x07 done'
    >>> escape_controls("\x1b[31mred\x1b[0m", keep_sgr=True) == "\x1b[31mred\x1b[0m"
    True
    >>> escape_controls("\x1b[31mred\x1b[0m")
    '\\x1b[31mred\\x1b[0m'
    >>> escape_controls("clear\x1b[2J line1\r\nline2\rX\tY")
    'clear\\x1b[2J line1\r\nline2\\x0dX\tY'
    >>> escape_controls("osc52 \x1b]52;c;aGk=\x1b\\ end")
    'osc52 \\x1b]52;c;aGk=\\x1b\\ end'
    """
    if not _needs_work(text):
        return text

    def one(match: re.Match[str]) -> str:
        seq = match.group(0)
        if keep_sgr and _SGR.fullmatch(seq):
            return seq
        if seq == "\r" and match.end() < len(text) and text[match.end()] == "\n":
            return seq
        return _visible(seq)

    return _SEQ.sub(one, text)


def _needs_work(text: str) -> bool:
    return any((ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F for ch in text)


def color_allowed(stream: t.TextIO) -> bool:
    """Colour is on when ``stream`` is a terminal and neither ``NO_COLOR`` nor ``TERM=dumb``.

    Examples
    --------
    >>> import io
    >>> color_allowed(io.StringIO())
    False
    """
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class SafeStream:
    """A text stream that escapes control sequences in everything written through it.

    Parameters
    ----------
    inner
        The real stream (``sys.stdout``).
    keep_sgr
        Let colour through (a colour terminal and colour not switched off).
    """

    def __init__(self, inner: t.TextIO, *, keep_sgr: bool) -> None:
        self._inner = inner
        self.keep_sgr = keep_sgr
        self._trusted = 0

    @contextlib.contextmanager
    def trusted(self) -> Iterator[None]:
        """Let politerm's own live display (cursor moves, redraws) through unchanged."""
        self._trusted += 1
        try:
            yield
        finally:
            self._trusted -= 1

    def write(self, text: str) -> int:
        """Write ``text`` with its control sequences escaped."""
        if not self._trusted:
            text = escape_controls(text, keep_sgr=self.keep_sgr)
        self._inner.write(text)
        return len(text)

    def writelines(self, lines: t.Iterable[str]) -> None:
        """Write each line through :meth:`write`."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> t.Any:
        # isatty, fileno, flush, encoding, errors, … are the inner stream's.
        return getattr(self._inner, name)


def install(*, no_color: bool = False) -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`SafeStream` (idempotent)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, SafeStream):
            stream.keep_sgr = stream.keep_sgr and not no_color
            continue
        if stream is None:
            continue
        keep = not no_color and color_allowed(stream)
        setattr(sys, name, SafeStream(stream, keep_sgr=keep))


def color_system(stream: t.TextIO | None = None) -> t.Literal["auto"] | None:
    """The ``color_system`` for a rich console on ``stream`` (stdout): None when colour is off.

    With ``--no-color`` (or ``NO_COLOR``, ``TERM=dumb``) a terminal gets no style sequence
    from politerm's own tables either, rather than each shown escaped.

    Examples
    --------
    >>> import io
    >>> color_system(SafeStream(io.StringIO(), keep_sgr=False)) is None
    True
    >>> color_system(SafeStream(io.StringIO(), keep_sgr=True))
    'auto'
    """
    import sys

    stream = stream or sys.stdout
    keep = stream.keep_sgr if isinstance(stream, SafeStream) else color_allowed(stream)
    return "auto" if keep else None


@contextlib.contextmanager
def trusted_stdout() -> Iterator[None]:
    """Within this block politerm's own display goes to stdout unchanged (live views)."""
    import sys

    stream = sys.stdout
    if isinstance(stream, SafeStream):
        with stream.trusted():
            yield
    else:
        yield
