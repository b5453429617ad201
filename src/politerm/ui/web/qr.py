"""A QR code drawn in the terminal, so a phone's camera can open the address ``poli web`` prints.

segno makes the code; it is drawn two modules per character cell with half blocks, black
on white whatever the terminal's colours (a camera reads dark-on-light codes most surely).
"""

from __future__ import annotations

import segno

_BORDER = 2
_ON = "\x1b[30;47m"  # black on white
_OFF = "\x1b[0m"
# (top dark, bottom dark) -> the character whose foreground (black) draws the dark halves
_CELLS = {(False, False): " ", (True, False): "▀", (False, True): "▄", (True, True): "█"}


def qr_matrix(text: str) -> list[list[bool]]:
    """The code's modules (True = dark), with a quiet zone of two modules around.

    Examples
    --------
    >>> m = qr_matrix("hi")
    >>> len(m), len(m[0]), any(m[0]), m[2][2]
    (25, 25, False, True)
    """
    code = segno.make(text, error="m", micro=False)  # phone cameras read full QR codes
    return [[bool(v) for v in row] for row in code.matrix_iter(border=_BORDER)]


def qr_text(text: str) -> str:
    r"""The code for ``text`` as terminal lines (ANSI colours, half blocks, no trailing newline).

    Examples
    --------
    >>> lines = qr_text("hi").splitlines()
    >>> len(lines), lines[0].startswith("\x1b[30;47m"), lines[0].endswith("\x1b[0m")
    (13, True, True)
    """
    rows = qr_matrix(text)
    if len(rows) % 2:
        rows.append([False] * len(rows[0]))
    lines = []
    for top, bottom in zip(rows[::2], rows[1::2], strict=True):
        cells = "".join(_CELLS[pair] for pair in zip(top, bottom, strict=True))
        lines.append(f"{_ON}{cells}{_OFF}")
    return "\n".join(lines)


def read_qr_text(drawn: str) -> list[list[bool]]:
    """The modules back from :func:`qr_text`'s lines (what a test compares or decodes).

    Examples
    --------
    >>> read_qr_text(qr_text("hi"))[:25] == qr_matrix("hi")
    True
    """
    back = {v: k for k, v in _CELLS.items()}
    rows: list[list[bool]] = []
    for line in drawn.splitlines():
        cells = line.replace(_ON, "").replace(_OFF, "")
        rows.append([back[c][0] for c in cells])
        rows.append([back[c][1] for c in cells])
    return rows
