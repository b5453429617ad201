r"""obi's legacy footer and its cross-check against the fenced report.

obi asks the agent to print, after the fenced report::

    STATUS: success|needs_help
    COMMIT_MSG:
    <the same multi-line summary>
    ESCALATION: <reason>

A key's value is on its own line or on the lines after it, up to the next key or the end of the
output. :class:`FooterReader` collects it line by line; :func:`cross_check` compares it with the
fence as obi does (status case-insensitively, the commit message against the fence's
``details`` -- and, because politerm's prompts ask for a one-line ``commit_msg``, against that
too -- and the escalation trimmed).
"""

from __future__ import annotations

import re
import typing as t

if t.TYPE_CHECKING:
    from politerm.protocol.report import Report

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


def footer_status(value: str) -> str:
    r"""The status word of a footer value: its first non-blank line, normalised.

    Examples
    --------
    >>> footer_status("\n  Needs Help\n")
    'needs_help'
    """
    from politerm.protocol.report import normalise_status

    first = next((ln for ln in value.splitlines() if ln.strip()), "")
    return normalise_status(first)


def commit_agrees(footer: str, report: Report) -> bool:
    r"""Whether a footer commit message matches the fence's commit message or details.

    Examples
    --------
    >>> from politerm.protocol.report import Report, ReportStatus
    >>> r = Report("s", ReportStatus.SUCCESS, "Add x", details="did x\nand y")
    >>> [commit_agrees(f, r) for f in ("Add x", "  did x\n  and y", "Add x\n\ndid x\nand y", "z")]
    [True, True, True, False]
    """
    got = normalise_multiline(footer)
    subject, body = report.commit_msg.strip(), normalise_multiline(report.details)
    accepted = {subject, body, f"{subject}\n\n{body}", f"{subject}\n{body}"}
    return got in accepted


def cross_check(report: Report, legacy: t.Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    """Compare the footer with the fence: ``(error, drift)``.

    A status that contradicts the fence is the error (obi stops the session on it); a footer
    status that is no status at all (a template copied verbatim) is drift, as are a
    disagreeing commit message and escalation.

    Examples
    --------
    >>> from politerm.protocol.report import Report, ReportStatus
    >>> r = Report("s", ReportStatus.SUCCESS, "Add x")
    >>> cross_check(r, {"STATUS": "SUCCESS", "COMMIT_MSG": "Add x"})
    (None, ())
    >>> cross_check(r, {"STATUS": "needs_help"})[0]
    "the report's status is 'success' but the legacy footer's is 'needs_help'"
    """
    from politerm.protocol.report import ReportStatus

    error: str | None = None
    out: list[str] = []
    if "STATUS" in legacy:
        status = footer_status(legacy["STATUS"])
        if status not in {s.value for s in ReportStatus}:
            out.append(f"status: footer says {legacy['STATUS']!r}, not success or needs_help")
        elif status != report.status.value:
            error = (
                f"the report's status is {report.status.value!r} but the legacy footer's is "
                f"{status!r}"
            )
    if "COMMIT_MSG" in legacy and not commit_agrees(legacy["COMMIT_MSG"], report):
        out.append(
            f"commit_msg: report says {report.commit_msg!r}, footer says "
            f"{normalise_multiline(legacy['COMMIT_MSG'])!r}"
        )
    if "ESCALATION" in legacy:
        theirs = normalise_multiline(legacy["ESCALATION"]) or None
        ours = normalise_multiline(report.escalation or "") or None
        if theirs != ours:
            out.append(f"escalation: report says {ours!r}, footer says {theirs!r}")
    return error, tuple(out)
