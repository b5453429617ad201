r"""The fenced session report an epic session ends with, and its streaming parser.

Each session's prompt asks the agent to end with::

    ```poli:<SESSION_UUID>
    status: success            # or needs_help
    commit_msg: One-line summary
    details: |
      multi-line body
    escalation: why a human is needed (required when status is needs_help)
    ```

:class:`ReportParser` is fed the agent's terminal output chunk by chunk (a fence may be split
anywhere between chunks, with noise before it). It accepts the ``obi:`` prefix too, strips the
renderer's gutter (bullets, indentation) at the fence's own column, and skips the user's echoed
prompt (where the instructions show a fence template). A fence for another session, a malformed
field, or ``needs_help`` without an escalation produce a :class:`~politerm.errors.ReportError`
*sentinel* at once, from :meth:`ReportParser.feed`, so the session can be stopped while the
agent still runs.

obi's legacy footer (``STATUS:``, ``COMMIT_MSG:``, ``ESCALATION:`` outside the fence, each value
on the key's line or on the lines after it up to the next key) is parsed as well and
cross-checked the way obi does: a footer status that contradicts the fence is an error (obi
stops the session); a commit message or escalation that disagrees is recorded in
:attr:`Report.drift`. A footer commit message agrees when it is the fence's ``commit_msg``, its
``details`` (obi's definition: the multi-line body), or the two together. ``obi:`` fences follow
obi's stricter rules: ``details`` is required and an unknown field is an error.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing as t

from politerm.errors import ReportError
from politerm.protocol.footer import FooterReader, normalise_multiline
from politerm.protocol.parser import GUTTER_CHARS, clean_line, strip_gutter

#: Fence prefixes accepted after the backticks (``obi:`` keeps prompts written for obi working).
PREFIXES: tuple[str, ...] = ("poli", "obi")

_OPEN = re.compile(r"^`{3,}(?P<prefix>[a-z]+):(?P<id>\S*)\s*$", re.IGNORECASE)
_CLOSE = re.compile(r"^`{3,}\s*$")
_FIELD = re.compile(r"^(?P<key>[a-z][a-z0-9_]*):(?:[ \t]+(?P<value>.*?))?[ \t]*$", re.IGNORECASE)
_ECHO_START = re.compile(r"^ ?[❯›>](?:\s|$)")
_BLOCK_MARKERS = frozenset({"|", "|-", "|+", ">", ">-"})
_TEXT_FIELDS = ("commit_msg", "details", "escalation")
_KNOWN_FIELDS = frozenset({"status", *_TEXT_FIELDS})
_BLOCK_FIELDS = frozenset({"details", "escalation"})


class ReportStatus(str, enum.Enum):
    """How a session says it ended."""

    SUCCESS = "success"
    NEEDS_HELP = "needs_help"


@dataclasses.dataclass(frozen=True)
class Report:
    """One session's fenced report.

    Attributes
    ----------
    session_id
        The UUID in the fence (this session's).
    status
        SUCCESS or NEEDS_HELP.
    commit_msg
        The one-line summary.
    details
        The multi-line body (``""`` when absent).
    escalation
        Why a human is needed (``None`` when absent).
    prefix
        ``poli`` or ``obi``.
    extra
        Fields we do not know, kept as written.
    legacy
        The legacy footer's fields (``STATUS`` …), as written.
    drift
        One line per disagreement between the fence and the legacy footer.
    line
        0-based line of the opening fence in the fed stream.
    """

    session_id: str
    status: ReportStatus
    commit_msg: str
    details: str = ""
    escalation: str | None = None
    prefix: str = "poli"
    extra: t.Mapping[str, str] = dataclasses.field(default_factory=dict)
    legacy: t.Mapping[str, str] = dataclasses.field(default_factory=dict)
    drift: tuple[str, ...] = ()
    line: int = 0


#: What :meth:`ReportParser.feed` returns: a finished report, or an error sentinel.
ReportSignal = Report | ReportError


def normalise_status(value: str) -> str:
    """Lower-case a status word and drop a trailing ``# comment``.

    Examples
    --------
    >>> normalise_status("success            # or needs_help")
    'success'
    >>> normalise_status("NEEDS HELP")
    'needs_help'
    """
    value = value.split("#", 1)[0].strip().strip("`*\"'").lower()
    return re.sub(r"[\s-]+", "_", value)


def footer_status(value: str) -> str:
    r"""The status word of a footer value: its first non-blank line, normalised.

    Examples
    --------
    >>> footer_status("\n  Needs Help\n")
    'needs_help'
    """
    first = next((ln for ln in value.splitlines() if ln.strip()), "")
    return normalise_status(first)


def commit_agrees(footer: str, report: Report) -> bool:
    r"""Whether a footer commit message matches the fence's commit message or details.

    Examples
    --------
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
    >>> r = Report("s", ReportStatus.SUCCESS, "Add x")
    >>> cross_check(r, {"STATUS": "SUCCESS", "COMMIT_MSG": "Add x"})
    (None, ())
    >>> cross_check(r, {"STATUS": "needs_help"})[0]
    "the report's status is 'success' but the legacy footer's is 'needs_help'"
    """
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


def _dedent(lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    cut = min(indents, default=0)
    return "\n".join(ln[cut:].rstrip() for ln in lines)


class _Echo:
    """Tracks whether a line belongs to the user's echoed prompt (``❯``/``›``/``>``)."""

    def __init__(self) -> None:
        self.active = False

    def is_echo(self, line: str) -> bool:
        if not line.strip():
            return self.active
        if _ECHO_START.match(line):
            self.active = True
            return True
        if self.active and line[0] in " \t":
            return True
        self.active = False
        return False


@dataclasses.dataclass
class _Fence:
    prefix: str
    session_id: str
    gutter: int
    line: int
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: dict[str, str] = dataclasses.field(default_factory=dict)
    block_key: str | None = None
    block: list[str] = dataclasses.field(default_factory=list)
    inline_key: str | None = None


class ReportParser:
    r"""Streaming parser of one session's fenced report.

    Parameters
    ----------
    session_id
        This session's UUID; a fence naming another one is an error.
    prefixes
        Accepted fence prefixes.

    Examples
    --------
    >>> sid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    >>> p = ReportParser(sid)
    >>> p.feed("noise\n```poli:" + sid[:10])
    []
    >>> p.feed(sid[10:] + "\nstatus: success\ncommit_msg: Add x\ndetails: |\n  line 1\n")
    []
    >>> [r.commit_msg for r in p.feed("  line 2\n```\n")]
    ['Add x']
    >>> p.finish().details
    'line 1\nline 2'
    >>> bad = ReportParser(sid)
    >>> str(bad.feed("```poli:00000000-0000-0000-0000-000000000000\n")[0]).split(",")[0]
    'line 0: report fence for session 00000000-0000-0000-0000-000000000000'
    """

    def __init__(self, session_id: str, *, prefixes: t.Sequence[str] = PREFIXES) -> None:
        self.session_id = session_id
        self.prefixes = tuple(prefixes)
        self.report: Report | None = None
        self.error: ReportError | None = None
        self.footer = FooterReader()
        self._fence: _Fence | None = None
        self._echo = _Echo()
        self._tail = ""
        self._line = 0

    @property
    def legacy(self) -> dict[str, str]:
        """The legacy footer's values seen so far."""
        return self.footer.values()

    @property
    def done(self) -> bool:
        """True once a report or an error was produced; later input changes nothing."""
        return self.report is not None or self.error is not None

    def feed(self, text: str) -> list[ReportSignal]:
        """Consume the next chunk of output; return a report or error completed by it."""
        buf = self._tail + text
        *complete, self._tail = buf.split("\n")
        out: list[ReportSignal] = []
        for raw in complete:
            signal = self._push(raw, self._line)
            self._line += 1
            if signal is not None:
                out.append(signal)
        return out

    def finish(self) -> Report:
        """The stream has ended: return the report (with drift) or raise why there is none.

        Raises
        ------
        ReportError
            An earlier error, a fence never closed, or no report at all.
        """
        if self._tail:
            tail, self._tail = self._tail, ""
            self._push(tail, self._line)
            self._line += 1
        if self.error is not None:
            raise self.error
        if self._fence is not None:
            msg = (
                f"line {self._fence.line}: the report fence {self._fence.prefix}:"
                f"{self._fence.session_id} was never closed"
            )
            self.error = ReportError(msg)
            raise self.error
        if self.report is None:
            seen = " (a legacy STATUS:/COMMIT_MSG: footer was seen)" if self.footer else ""
            msg = f"no ```poli:{self.session_id} report in the session's output{seen}"
            self.error = ReportError(msg)
            raise self.error
        legacy = self.footer.values()
        error, drifted = cross_check(self.report, legacy)
        if error is not None:
            self.error = ReportError(f"{error} (obi stops a session on this)")
            raise self.error
        self.report = dataclasses.replace(self.report, legacy=legacy, drift=drifted)
        return self.report

    # --- lines ----------------------------------------------------------------------------

    def _fail(self, line: int, message: str) -> ReportError:
        self.error = ReportError(f"line {line}: {message}")
        self._fence = None
        return self.error

    def _push(self, raw: str, index: int) -> ReportSignal | None:
        if self.error is not None:
            return None
        line = clean_line(raw)
        if self._fence is not None:
            return self._body(line, index)
        if self._echo.is_echo(line):
            return None
        stripped = strip_gutter(line)
        m = _OPEN.match(stripped)
        if m is not None:
            self.footer.end()
        elif self.footer.line(stripped):
            return None
        if self.report is not None or m is None:
            return None  # a redraw of the report, or talk after it
        prefix = m["prefix"].lower()
        if prefix not in self.prefixes:
            return None
        sid = m["id"]
        if sid.lower() != self.session_id.lower():
            return self._fail(index, f"report fence for session {sid}, expected {self.session_id}")
        self._fence = _Fence(prefix, self.session_id, len(line) - len(stripped), index)
        return None

    def _body(self, line: str, index: int) -> ReportSignal | None:
        fence = self._fence
        assert fence is not None
        head = line[: fence.gutter]
        body = line[fence.gutter :] if not head.strip(GUTTER_CHARS) else strip_gutter(line)
        if _CLOSE.match(body.strip()) and not (fence.block_key and body.startswith((" ", "\t"))):
            self._end_block(fence)
            return self._close(fence, index)
        if fence.block_key is not None:
            if not body.strip() or body[0] in " \t":
                fence.block.append(body)
                return None
            self._end_block(fence)
        if not body.strip():
            fence.inline_key = None
            return None
        m = _FIELD.match(body)
        if m is None:
            if fence.inline_key is not None:
                # A long inline value the terminal wrapped, or a plain multi-line value.
                key = fence.inline_key
                fence.fields[key] = f"{fence.fields[key]}\n{body.strip()}"
                return None
            return self._fail(index, f"malformed report line (expected `key: value`): {body!r}")
        key, value = m["key"].lower(), (m["value"] or "")
        fence.inline_key = None
        if key in fence.fields or key in fence.extra:
            return self._fail(index, f"report field {key!r} given twice")
        if key == "status":
            status = normalise_status(value)
            if status not in {s.value for s in ReportStatus}:
                return self._fail(
                    index, f"report status must be success or needs_help, got {value!r}"
                )
            fence.fields[key] = status
        elif key in _TEXT_FIELDS:
            if value in _BLOCK_MARKERS:
                if key not in _BLOCK_FIELDS:
                    return self._fail(index, f"report field {key!r} must be one line")
                fence.block_key = key
                fence.block = []
                fence.fields[key] = ""
            else:
                fence.fields[key] = value
                if key in _BLOCK_FIELDS:
                    fence.inline_key = key
        elif fence.prefix == "obi":
            return self._fail(index, f"unknown field {key!r} in an obi: report")
        else:
            fence.extra[key] = value
        return None

    @staticmethod
    def _end_block(fence: _Fence) -> None:
        if fence.block_key is not None:
            fence.fields[fence.block_key] = _dedent(fence.block)
            fence.block_key = None
            fence.block = []

    def _close(self, fence: _Fence, index: int) -> ReportSignal:
        f = fence.fields
        self._fence = None
        if "status" not in f:
            return self._fail(index, "report has no status field")
        commit = f.get("commit_msg", "").strip()
        if not commit:
            return self._fail(index, "report has no commit_msg (a one-line summary is required)")
        if "\n" in commit:
            return self._fail(index, "report field 'commit_msg' must be one line")
        if fence.prefix == "obi" and not (f.get("details") or "").strip():
            return self._fail(index, "obi: report has no details (obi requires them)")
        status = ReportStatus(f["status"])
        escalation = (f.get("escalation") or "").strip() or None
        if status is ReportStatus.NEEDS_HELP and escalation is None:
            return self._fail(index, "report status needs_help without an escalation")
        self.report = Report(
            session_id=fence.session_id,
            status=status,
            commit_msg=commit,
            details=(f.get("details") or "").strip("\n"),
            escalation=escalation,
            prefix=fence.prefix,
            extra=dict(fence.extra),
            line=fence.line,
        )
        return self.report
