r"""obi's legacy footer, read line by line beside the fenced report.

obi asks the agent to print, after the fenced report::

    STATUS: success|needs_help
    COMMIT_MSG:
    <the same multi-line summary>
    ESCALATION: <reason>

A key's value is on its own line or on the lines after it, up to the next key or the end of the
output. :class:`FooterReader` collects it line by line. The report's parser compares it with the
fence as obi does (:func:`politerm.protocol.report.cross_check`: status case-insensitively, the
commit message against the fence's ``details`` -- and, because politerm's prompts ask for a
one-line ``commit_msg``, against that too -- and the escalation trimmed); this module knows
nothing of the report, so the parser can use it without a circle.
"""

from __future__ import annotations

import re

#: The footer's keys, upper-case as obi matches them.
KEYS: tuple[str, ...] = ("STATUS", "COMMIT_MSG", "ESCALATION")

_KEY = re.compile(r"^\**(?P<key>STATUS|COMMIT_MSG|ESCALATION)\**:\**[ \t]*(?P<value>.*?)\s*$")
# A value continued on following lines ends at a fence, at the TUI's box and input line, or
# at Claude's end-of-turn line ("✻ Brewed for 3s").
_STOP = re.compile(r"^\s*(?:`{3}|[╭╰│─━✻]|[❯›>](?:\s|$))")
#: Lines kept for one value; more is a runaway stream, not a footer.
MAX_LINES = 200


def normalise_multiline(text: str) -> str:
    r"""Trim a multi-line value for comparison: outer blank lines, trailing spaces, indent.

    Examples
    --------
    >>> normalise_multiline("\n  Add x  \n\n  - detail\n\n")
    'Add x\n\n- detail'
    """
    lines = text.strip("\n").split("\n")
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    cut = min(indents, default=0)
    return "\n".join(ln[cut:].rstrip() for ln in lines).strip()


class FooterReader:
    r"""Collects the footer's values from cleaned, gutter-stripped lines.

    Examples
    --------
    >>> f = FooterReader()
    >>> for line in ["STATUS: success", "COMMIT_MSG:", "Add x", "", "body", "ESCALATION:"]:
    ...     _ = f.line(line)
    >>> f.values()
    {'STATUS': 'success', 'COMMIT_MSG': 'Add x\n\nbody', 'ESCALATION': ''}
    >>> g = FooterReader()
    >>> for line in ["COMMIT_MSG: Add x", "", "✻ Brewed for 0s"]:
    ...     _ = g.line(line)
    >>> g.values()
    {'COMMIT_MSG': 'Add x'}
    """

    def __init__(self) -> None:
        self._values: dict[str, list[str]] = {}
        self._key: str | None = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def line(self, text: str) -> bool:
        """Take one line; True if it belonged to the footer (a key or a continued value)."""
        m = _KEY.match(text)
        if m is not None:
            # The last footer printed wins, as in obi (a redraw repeats it).
            self._key = m["key"]
            self._values[self._key] = [m["value"]]
            return True
        if self._key is None:
            return False
        if _STOP.match(text):
            self._key = None
            return False
        lines = self._values[self._key]
        if len(lines) >= MAX_LINES:
            self._key = None
            return False
        lines.append(text)
        return True

    def end(self) -> None:
        """A fence or other structure starts: the current value ends here."""
        self._key = None

    def values(self) -> dict[str, str]:
        """Each key's value, multi-line values trimmed of outer blank lines."""
        return {key: "\n".join(lines).strip() for key, lines in self._values.items()}
