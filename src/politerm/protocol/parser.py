"""Find tagged blocks in rendered agent screens and in append-only transcripts.

The parser survives what the five CLIs' renderers do to a block (see ``realcli.md``): a
gutter of bullets, borders and indentation on every line; ``[X]`` instead of ``[[X]]``;
closing tags indented as lazy list continuations; unstable blank lines; re-rendered list
markers; headers wrapped mid-string; stripped emphasis; dropped inner tags. It refuses
blocks inside the user's echoed prompt and, given the turn's nonce, blocks from other
turns. Every refused candidate is kept as a :class:`Rejection` with a one-line reason.

Two ways in:

* :meth:`BlockParser.feed` for append-only text (a transcript file being tailed): only the
  unfinished last line and the open candidate are kept between calls.
* :meth:`BlockParser.scan_screen` for a screen or scrollback capture that is redrawn and
  scanned again and again; blocks already reported (same :attr:`Block.dedupe_key`) are
  not reported twice.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import itertools
import json
import logging
import re
import typing as t

import jsonschema

from politerm.errors import BlockRejected
from politerm.protocol.block import Block, resolve_file_body

if t.TYPE_CHECKING:
    import pathlib

logger = logging.getLogger(__name__)

#: Characters a renderer puts in front of content: indent, reply bullets, borders, tool gutters.
GUTTER_CHARS = " \t●•✦┃│⎿⏺"

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_GUTTER = re.compile(f"^[{re.escape(GUTTER_CHARS)}]*")
# Emphasis markers may survive around a tag in raw transcripts (`**[[POLI:MSG ...]]**`).
_HEADER = re.compile(r"^[`*_]*\[{1,2}POLI:MSG(?=[\s{]|$)\s*(?P<rest>.*)$")
_CLOSE = re.compile(r"^[`*_]*\[{1,2}/POLI:MSG\s*\]{1,2}")
_CLOSE_ANYWHERE = re.compile(r"\[{1,2}/POLI:MSG\s*\]{1,2}")
_HEADER_END = re.compile(r"\}\s*\]{1,2}")
_HEADER_FINAL = re.compile(r"\}\s*\]{1,2}[`*_]*\s*$")
_FENCE = re.compile(r"^(?:`{3,}|~{3,})[\w.+-]*$")
_TAG_LINE = re.compile(r"^</?[A-Za-z][\w-]*>$")
_OPEN_TAG_PREFIX = re.compile(r"^<([A-Z][A-Z0-9_-]*)>\s*")
_CLOSE_TAG_SUFFIX = re.compile(r"\s*</([A-Z][A-Z0-9_-]*)>$")
# A prompt echo starts at column 0 or 1 with the CLI's prompt glyph (Claude ❯, Codex ›,
# Gemini " > ", aider "> "); its continuation lines are indented.
_ECHO_START = re.compile(r"^ ?[❯›>](?:\s|$)")
_ECHO_GLYPH = re.compile(r"^\s*[❯›>┃]\s?")
_ECHO_BAR_TOP = re.compile(r"^\s*▄+\s*$")
_ECHO_BAR_BOTTOM = re.compile(r"^\s*▀+\s*$")

#: A wrapped header spans at most this many screen lines.
MAX_HEADER_LINES = 8
#: Joins tried exhaustively up to this many wrap points (2**n candidates).
_MAX_JOIN_COMBOS = 6


class Rejection(t.NamedTuple):
    """A candidate block that was seen and refused.

    Parameters
    ----------
    line : int
        0-based index of the candidate's header line in the scanned lines or fed stream.
    reason : str
        One line saying why.
    text : str
        The start of the header line, for the log.
    """

    line: int
    reason: str
    text: str = ""


class ParseResult(t.NamedTuple):
    """What :func:`parse_blocks` found."""

    blocks: list[Block]
    rejections: list[Rejection]


@functools.cache
def _schema() -> dict[str, t.Any]:
    text = (
        importlib.resources.files("politerm.protocol")
        .joinpath("header.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, t.Any] = json.loads(text)
    return schema


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = _schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def header_schema() -> dict[str, t.Any]:
    """Return (a copy of) the JSON Schema every header is validated against."""
    return json.loads(json.dumps(_schema()))  # type: ignore[no-any-return]


def clean_line(line: str) -> str:
    r"""Drop ANSI escapes, carriage-return overdraws and trailing blanks from one line.

    Examples
    --------
    >>> clean_line("\x1b[38;5;255mDONE\x1b[0m  \r")
    'DONE'
    >>> clean_line("old text\rnew")
    'new'
    """
    line = _ANSI.sub("", line).rstrip("\r\n")
    if "\r" in line:
        # The terminal would have overwritten everything before the last carriage return.
        line = line.rsplit("\r", 1)[1]
    return line.rstrip()


def strip_gutter(line: str) -> str:
    """Remove the rendering prefix: indentation, reply bullets and left borders.

    Examples
    --------
    >>> strip_gutter("● [[POLI:MSG {}]]")
    '[[POLI:MSG {}]]'
    >>> strip_gutter("  ┃  please run")
    'please run'
    >>> strip_gutter("        [[/POLI:MSG]]")
    '[[/POLI:MSG]]'
    """
    return _GUTTER.sub("", line)


def is_header_line(line: str) -> bool:
    """Tell whether a line opens a block (``[[POLI:MSG`` or ``[POLI:MSG`` after the gutter).

    Examples
    --------
    >>> is_header_line('     [POLI:MSG {"to":"ORCH"}]')
    True
    >>> is_header_line("The [[POLI:MSG tag opens a block")
    False
    """
    return _HEADER.match(strip_gutter(clean_line(line))) is not None


def is_close_line(line: str) -> bool:
    """Tell whether a line closes a block, at any indentation, with one or two brackets.

    Examples
    --------
    >>> is_close_line("          [[/POLI:MSG]]")
    True
    >>> is_close_line("     [/POLI:MSG]")
    True
    >>> is_close_line("[[/POLI:MSGX]]")
    False
    """
    return _CLOSE.match(strip_gutter(clean_line(line))) is not None


def _header_reason(exc: json.JSONDecodeError) -> str:
    return f"header is not valid JSON: {exc.msg} at column {exc.colno}"


def _string_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every JSON string literal in ``text``, quotes included."""
    spans: list[tuple[int, int]] = []
    begin = -1
    escaped = False
    for i, ch in enumerate(text):
        if begin < 0:
            if ch == '"':
                begin = i
        elif escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            spans.append((begin, i + 1))
            begin = -1
    if begin >= 0:
        spans.append((begin, len(text)))
    return spans


def _join_orders(pieces: t.Sequence[str]) -> t.Iterable[tuple[str, ...]]:
    """Separators to try between wrapped header pieces, the likeliest first.

    The CLIs wrap at word boundaries and swallow the space there, so inside prose (a
    string value holding other spaces) a space is the likely join. A word longer than the
    line (compact JSON, a hash, a path) is cut where the line is full, with nothing lost:
    inside a string without spaces, and between JSON tokens, no space is the likely join.
    The other choice is still tried when the likely one does not make valid JSON.
    """
    if len(pieces) < 2:
        return [()]
    text = " ".join(pieces)
    breaks: list[int] = []
    pos = 0
    for piece in pieces[:-1]:
        pos += len(piece)
        breaks.append(pos)
        pos += 1
    inserted = set(breaks)
    spans = _string_spans(text)
    prefs: list[tuple[str, str]] = []
    for b in breaks:
        span = next((sp for sp in spans if sp[0] < b < sp[1]), None)
        prose = span is not None and any(
            ch.isspace()
            for i, ch in enumerate(text[span[0] : span[1]], span[0])
            if i not in inserted
        )
        prefs.append((" ", "") if prose else ("", " "))
    if len(prefs) <= _MAX_JOIN_COMBOS:
        return itertools.product(*prefs)
    return [tuple(p[0] for p in prefs), tuple(p[1] for p in prefs)]


def _split_header(parts: t.Sequence[str]) -> tuple[dict[str, t.Any], str]:
    """Parse header lines (gutter already stripped); return (header, text after ``]]``)."""
    first = _HEADER.match(parts[0])
    if first is None:
        msg = "not a POLI:MSG header line"
        raise BlockRejected(msg)
    # A wrap right after the tag leaves the tag alone on its line.
    pieces = [p for p in (first.group("rest").strip(), *(p.strip() for p in parts[1:])) if p]
    if not pieces:
        msg = "header has no JSON object after POLI:MSG"
        raise BlockRejected(msg)
    if not pieces[0].startswith("{"):
        msg = "header has no JSON object after POLI:MSG"
        raise BlockRejected(msg)
    joins = _join_orders(pieces)
    first_error: str | None = None
    for seps in joins:
        text = pieces[0] + "".join(sep + piece for sep, piece in zip(seps, pieces[1:], strict=True))
        ends = list(_HEADER_END.finditer(text))
        if not ends:
            first_error = first_error or "header does not end with '}]]'"
            continue
        for end in ends:
            candidate = text[: end.start() + 1]
            try:
                value = json.loads(candidate)
            except json.JSONDecodeError as exc:
                first_error = first_error or _header_reason(exc)
                continue
            if not isinstance(value, dict):
                msg = "header is not a JSON object"
                raise BlockRejected(msg)
            return value, text[end.end() :]
    msg = first_error or "header is not valid JSON"
    raise BlockRejected(msg)


def validate_header(header: t.Mapping[str, t.Any], *, nonce: str | None = None) -> None:
    """Check a header against the schema and, if given, the expected nonce.

    Raises
    ------
    BlockRejected
        With a one-line reason.

    Examples
    --------
    >>> validate_header({"to": "EXECUTER", "type": "plan", "id": "T1"})
    >>> validate_header({"to": "EXECUTER", "type": "plan"})
    Traceback (most recent call last):
    ...
    politerm.errors.BlockRejected: header misses required key 'id'
    >>> validate_header({"to": "E", "type": "plan", "id": "T1", "nonce": "ab12"}, nonce="cd34")
    Traceback (most recent call last):
    ...
    politerm.errors.BlockRejected: nonce 'ab12' is not this turn's nonce 'cd34'
    """
    errors = sorted(_validator().iter_errors(dict(header)), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        if err.validator == "required":
            missing = [k for k in t.cast("list[str]", err.validator_value) if k not in header]
            msg = f"header misses required key {missing[0]!r}"
            raise BlockRejected(msg)
        where = ".".join(str(p) for p in err.path) or "(root)"
        msg = f"header key {where!r}: {err.message}"
        raise BlockRejected(msg)
    if nonce is not None:
        got = header.get("nonce")
        if got is None:
            msg = f"header has no nonce (this turn's nonce is {nonce!r})"
            raise BlockRejected(msg)
        if str(got).lower() != nonce.lower():
            msg = f"nonce {got!r} is not this turn's nonce {nonce!r}"
            raise BlockRejected(msg)


def parse_header(lines: str | t.Sequence[str], *, nonce: str | None = None) -> dict[str, t.Any]:
    """Parse and validate a header, joining lines the CLI wrapped.

    Parameters
    ----------
    lines : str or sequence of str
        The opening line, then any continuation lines, as rendered (gutter included).
    nonce : str, optional
        The nonce the header must carry.

    Returns
    -------
    dict
        The header object, unknown keys included.

    Raises
    ------
    BlockRejected
        If the JSON is malformed, a required key is missing or the nonce is wrong.

    Examples
    --------
    >>> parse_header('● [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]')["id"]
    'T1'
    >>> parse_header(['  [[POLI:MSG {"to":"E","type":"plan","id":"T3","note":"alpha bravo',
    ...               '  charlie","sha256":"00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff',
    ...               '  00ff00ff00ff00ff00ff"}]]'])["note"]
    'alpha bravo charlie'
    >>> parse_header('[POLI:MSG {"to":"E","type":"plan","id":"T1",}]')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    politerm.errors.BlockRejected: header is not valid JSON: Expecting property name ... column 35
    """
    seq = [lines] if isinstance(lines, str) else list(lines)
    header, _ = _split_header([strip_gutter(clean_line(ln)) for ln in seq])
    validate_header(header, nonce=nonce)
    return header


def _strip_cols(line: str, width: int) -> str:
    """Remove up to ``width`` gutter characters from the left of a body line."""
    i = 0
    while i < width and i < len(line) and line[i] in GUTTER_CHARS:
        i += 1
    return line[i:]


def extract_body(lines: t.Sequence[str], gutter: int = 0) -> str:
    """Turn the rendered lines between header and closing tag into the body text.

    Removes the block's gutter (the column its header started at), an opening ``<TAG>``
    and closing ``</TAG>`` (also when a list continuation indented them), unbalanced
    fence lines at either end, the common indentation, and runs of blank lines.

    Examples
    --------
    >>> lines = ["  <PLAN>", "", "  1. do the thing", "", "  2. check", "     </PLAN>"]
    >>> print(extract_body(lines, 2))
    1. do the thing
    <BLANKLINE>
    2. check
    >>> extract_body(["<RESULT>all good</RESULT>"])
    'all good'
    """
    body = [_strip_cols(clean_line(ln), gutter).rstrip() for ln in lines]

    def edges() -> tuple[int, int] | None:
        idx = [i for i, ln in enumerate(body) if ln.strip()]
        return (idx[0], idx[-1]) if idx else None

    e = edges()
    if e is not None:
        first, last = e
        head = body[first].strip()
        if _TAG_LINE.match(head) and not head.startswith("</"):
            body[first] = ""
        elif m := _OPEN_TAG_PREFIX.match(head):
            body[first] = body[first].replace(m.group(0).strip(), "", 1).rstrip()
        tail = body[last].strip()
        if last != first or body[last]:
            if _TAG_LINE.match(tail) and tail.startswith("</"):
                body[last] = ""
            elif m := _CLOSE_TAG_SUFFIX.search(body[last]):
                body[last] = body[last][: m.start()]
    fences = [i for i, ln in enumerate(body) if _FENCE.match(ln.strip())]
    if len(fences) % 2 == 1 and (e := edges()) is not None:
        # A fence the agent opened inside the block but closed outside it (or vice versa).
        for i in (e[0], e[1]):
            if i in fences:
                body[i] = ""
                break
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in body if ln.strip()]
    common = min(indents) if indents else 0
    out: list[str] = []
    for ln in body:
        ln = ln[common:] if ln.strip() else ""
        if ln or (out and out[-1]):
            out.append(ln)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


class _EchoTracker:
    """Classify lines, in order, as part of the user's echoed prompt or not."""

    def __init__(self) -> None:
        self.in_echo = False
        self.in_bar = False

    def is_echo(self, line: str) -> bool:
        if not line.strip():
            return self.in_echo or self.in_bar
        if _ECHO_BAR_TOP.match(line):
            # Gemini draws the user's prompts (and its input box) between ▄▄▄ and ▀▀▀.
            self.in_bar, self.in_echo = True, False
            return True
        if _ECHO_BAR_BOTTOM.match(line):
            self.in_bar = False
            return True
        if self.in_bar:
            return True
        if line.lstrip().startswith("┃"):
            # opencode marks every line of a user prompt (and its input box) with ┃.
            return True
        if _ECHO_START.match(line):
            self.in_echo = True
            return True
        if self.in_echo and line[0] in " \t":
            return True
        self.in_echo = False
        return False


def is_prompt_echo(lines: t.Sequence[str]) -> list[bool]:
    """Flag, for each line, whether it belongs to an echoed user prompt.

    Examples
    --------
    >>> is_prompt_echo(["❯ line one", "  line two", "", "● reply", "  more"])
    [True, True, True, False, False]
    >>> is_prompt_echo(["  ┃  prompt", "     reply"])
    [True, False]
    """
    tracker = _EchoTracker()
    return [tracker.is_echo(clean_line(ln)) for ln in lines]


def last_prompt_line(lines: t.Sequence[str], prompt: str | None = None) -> int:
    """Index of the last line where a prompt echo starts, or -1.

    Pass the prompt that was sent: its echo is then found by its first line, which skips
    the input box and its placeholder text at the bottom of the screen. Without it, the
    last echo start with any text is returned. Scan from the next line on.

    Examples
    --------
    >>> screen = ["❯ make a plan", "● ok", "❯ run it", "● done", "────", "❯ "]
    >>> last_prompt_line(screen)
    2
    >>> last_prompt_line(screen, "make a plan")
    0
    """
    want = " ".join(prompt.strip().splitlines()[0].split()) if prompt and prompt.strip() else None
    found = -1
    tracker = _EchoTracker()
    for i, raw in enumerate(lines):
        line = clean_line(raw)
        if not tracker.is_echo(line):
            continue
        starts = bool(_ECHO_START.match(line)) or line.lstrip().startswith("┃")
        text = " ".join(_ECHO_GLYPH.sub("", line).split())
        if not starts or not text:
            continue
        if want is None:
            found = i
            continue
        # The echo's first screen line may be the prompt's first line cut by the wrap.
        n = min(len(text), len(want), 60)
        if n >= min(len(want), 12) and text[:n] == want[:n]:
            found = i
    return found


@dataclasses.dataclass
class _Candidate:
    line: int
    raw: list[str]
    header_parts: list[str]
    gutter: int
    echo: bool
    header: dict[str, t.Any] | None = None
    body: list[str] = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def text(self) -> str:
        return strip_gutter(self.raw[0])[:120]


_Event = Block | Rejection


# A code-block line number after the reply gutter: "   12 text" or a bare "   12".
_LINE_NO = re.compile(r"^([ ●•✦┃│⎿⏺]*?)(\d{1,5})(?: +|$)")


class _Machine:
    """The line-by-line state machine shared by :meth:`feed` and :meth:`scan_screen`."""

    def __init__(
        self,
        *,
        nonce: str | None,
        detect_echo: bool,
        final: bool,
        max_body_lines: int,
    ) -> None:
        self.nonce = nonce
        self.detect_echo = detect_echo
        self.final = final
        self.max_body_lines = max_body_lines
        self.echo = _EchoTracker()
        self.cand: _Candidate | None = None
        # Gemini numbers the lines of code blocks ("   1 [[POLI:MSG ..."): the number we
        # expect on the next line of a numbered block, or None.
        self.next_no: int | None = None

    def _unnumber(self, line: str) -> str:
        """Blank out a code-block line number (keeping columns), tracking the sequence."""
        m = _LINE_NO.match(line)
        if m is None:
            self.next_no = None
            return line
        n = int(m.group(2))
        if self.next_no is None:
            # A numbered block starts only on a numbered header line.
            rest = line[m.end() :]
            if not _HEADER.match(strip_gutter(rest)):
                return line
        elif n != self.next_no:
            self.next_no = None
            return line
        self.next_no = n + 1
        return line[: m.start(2)] + " " * len(m.group(2)) + line[m.end(2) :]

    def in_body(self) -> bool:
        return self.cand is not None and self.cand.header is not None

    def pending(self) -> Rejection | None:
        c = self.cand
        if c is None:
            return None
        what = "no closing tag yet" if c.header is not None else "header not finished yet"
        return Rejection(c.line, what, c.text)

    def push(self, raw: str, index: int) -> list[_Event]:
        line = self._unnumber(clean_line(raw))
        echo = self.echo.is_echo(line) if self.detect_echo else False
        # On an echo line the prompt glyph is part of the gutter: a block there is still
        # seen, so that its rejection says why.
        stripped = strip_gutter(_ECHO_GLYPH.sub("", line) if echo else line)
        out: list[_Event] = []
        c = self.cand
        if c is not None and c.header is None:
            # Collecting a wrapped header: this line continues it unless it plainly cannot.
            if (
                not stripped
                or echo != c.echo
                or _HEADER.match(stripped)
                or _CLOSE.match(stripped)
                or _TAG_LINE.match(stripped)
                or _FENCE.match(stripped)
                or len(c.header_parts) >= MAX_HEADER_LINES
            ):
                out.append(self._reject(c, c.error or "header does not end with '}]]'"))
                self.cand = c = None
            else:
                c.raw.append(line)
                c.header_parts.append(stripped)
                out.extend(self._try_header(c))
                return out
        if c is not None:
            if _CLOSE.match(stripped):
                out.append(self._finish(c))
                self.cand = None
                return out
            if _HEADER.match(stripped):
                out.append(self._reject(c, "a new header began before the closing tag"))
                self.cand = c = None
            elif echo and not c.echo:
                self.cand = None
                if self.final:
                    out.append(self._reject(c, "a prompt echo came before the closing tag"))
                return out
            elif len(c.body) >= self.max_body_lines:
                out.append(self._reject(c, f"no closing tag within {self.max_body_lines} lines"))
                self.cand = c = None
            else:
                c.raw.append(line)
                c.body.append(line)
                return out
        if _HEADER.match(stripped):
            c = _Candidate(
                line=index,
                raw=[line],
                header_parts=[stripped],
                gutter=len(line) - len(stripped),
                echo=echo,
            )
            self.cand = c
            out.extend(self._try_header(c))
        return out

    def _try_header(self, c: _Candidate) -> list[_Event]:
        try:
            header, rest = _split_header(c.header_parts)
        except BlockRejected as exc:
            c.error = str(exc)
            if _HEADER_FINAL.search(c.header_parts[-1]):
                # The writer ended the header here; more lines will not repair it.
                self.cand = None
                return [self._reject(c, c.error)]
            return []
        if c.echo:
            self.cand = None
            return [self._reject(c, "block is inside an echoed prompt")]
        try:
            validate_header(header, nonce=self.nonce)
        except BlockRejected as exc:
            self.cand = None
            return [self._reject(c, str(exc))]
        c.header = header
        # Emphasis markers that wrapped the whole header line are not body text, nor is
        # what a sidebar (opencode's, if enabled) draws to the right of it.
        if re.fullmatch(r"[`*_\s]*", rest) or rest.startswith("   "):
            rest = ""
        rest = rest.strip()
        if rest:
            # One-line block, or body text on the header line.
            close = _CLOSE_ANYWHERE.search(rest)
            if close is not None:
                c.body.append(rest[: close.start()])
                self.cand = None
                return [self._finish(c)]
            c.body.append(rest)
        return []

    def _reject(self, c: _Candidate, reason: str) -> Rejection:
        return Rejection(c.line, reason, c.text)

    def _finish(self, c: _Candidate) -> Block:
        assert c.header is not None
        # The header line fixes the gutter; body text on the header line has none left.
        body = extract_body(c.body, c.gutter)
        return Block.from_header(c.header, body, raw_lines=c.raw, line=c.line)


class BlockParser:
    r"""Incremental, de-duplicating finder of well-formed blocks.

    Parameters
    ----------
    nonce : str, optional
        This turn's nonce. When set, blocks without it or with another one are rejected.
        Change it per turn with :meth:`expect_nonce`.
    detect_echo : bool
        Refuse blocks inside an echoed user prompt (lines after ``❯``, ``›``, `` > ``,
        ``> ``, ``┃`` or between Gemini's ``▄▄▄``/``▀▀▀`` bars). Turn off for transcripts,
        which hold only the assistant's text.
    message_dir : pathlib.Path, optional
        If given, ``file`` blocks get their body read from there
        (:func:`resolve_file_body`); failures become rejections.
    max_body_lines : int
        A candidate with no closing tag after this many lines is rejected.

    Examples
    --------
    >>> p = BlockParser()
    >>> p.feed('● [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]\n  <PLAN>\n  1. go\n')
    []
    >>> [b.body for b in p.feed("  </PLAN>\n  [[/POLI:MSG]]\n")]
    ['1. go']
    >>> head = '  [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]'
    >>> p.scan_screen([head, "1. go", "[[/POLI:MSG]]"])
    []
    >>> p.latest().id
    'T1'
    """

    def __init__(
        self,
        *,
        nonce: str | None = None,
        detect_echo: bool = True,
        message_dir: pathlib.Path | None = None,
        max_body_lines: int = 5000,
    ) -> None:
        self.nonce = nonce
        self.detect_echo = detect_echo
        self.message_dir = message_dir
        self.max_body_lines = max_body_lines
        #: Every distinct well-formed block seen, in order.
        self.blocks: list[Block] = []
        #: Every distinct refused candidate, in order.
        self.rejections: list[Rejection] = []
        self._seen: set[str] = set()
        self._seen_rejections: set[tuple[str, str]] = set()
        self._stream = self._machine(final=True)
        self._stream_line = 0
        self._tail = ""
        self._tail_done = False
        self._screen_pending: Rejection | None = None

    def _machine(self, *, final: bool) -> _Machine:
        return _Machine(
            nonce=self.nonce,
            detect_echo=self.detect_echo,
            final=final,
            max_body_lines=self.max_body_lines,
        )

    def expect_nonce(self, nonce: str | None) -> None:
        """Set the nonce for the next turn; blocks already seen stay seen."""
        self.nonce = nonce
        self._stream.nonce = nonce

    @property
    def pending(self) -> Rejection | None:
        """The candidate still open (header seen, no closing tag yet), if any.

        From the last :meth:`scan_screen` call if there was one, else from the stream.
        """
        return self._screen_pending or self._stream.pending()

    def _take(self, events: t.Iterable[_Event]) -> list[Block]:
        new: list[Block] = []
        for ev in events:
            if isinstance(ev, Rejection):
                self._record(ev)
                continue
            block = ev
            if block.file is not None and self.message_dir is not None:
                try:
                    block = resolve_file_body(block, self.message_dir)
                except BlockRejected as exc:
                    self._record(Rejection(block.line, str(exc), strip_gutter(block.raw_lines[0])))
                    continue
            key = block.dedupe_key
            if key in self._seen:
                continue
            self._seen.add(key)
            self.blocks.append(block)
            new.append(block)
        return new

    def _record(self, rej: Rejection) -> None:
        key = (rej.reason, rej.text)
        if key in self._seen_rejections:
            return
        self._seen_rejections.add(key)
        self.rejections.append(rej)
        logger.info("rejected POLI:MSG candidate at line %d: %s", rej.line, rej.reason)

    def feed(self, text: str) -> list[Block]:
        """Consume the next chunk of an append-only source; return the blocks it completed.

        Chunks may split anywhere, even inside a line or an escape sequence; the result
        is the same as feeding everything at once.
        """
        buf = self._tail + text
        *complete, self._tail = buf.split("\n")
        events: list[_Event] = []
        for line in complete:
            if self._tail_done:
                # This line's start (a closing tag) was already handled from the tail.
                self._tail_done = False
            else:
                events.extend(self._stream.push(line, self._stream_line))
            self._stream_line += 1
        if (
            self._tail
            and not self._tail_done
            and self._stream.in_body()
            and _CLOSE.match(strip_gutter(clean_line(self._tail)))
        ):
            # A closing tag needs nothing after it: report the block without waiting for
            # the newline, which a reply's last line may never get.
            events.extend(self._stream.push(self._tail, self._stream_line))
            self._tail_done = True
        return self._take(events)

    def flush(self) -> list[Block]:
        """Treat the unfinished last line as complete (the source has ended)."""
        if not self._tail or self._tail_done:
            return []
        line, self._tail = self._tail, ""
        events = self._stream.push(line, self._stream_line)
        self._stream_line += 1
        return self._take(events)

    def scan_screen(self, lines: str | t.Sequence[str], start: int = 0) -> list[Block]:
        """Scan a screen or scrollback capture; return blocks not reported before.

        Parameters
        ----------
        lines : str or sequence of str
            The captured lines (``capture-pane -p -J``); a string is split on newlines.
        start : int
            Index of the first line to look at, e.g. ``last_prompt_line(...) + 1`` so
            that nothing at or above the echoed prompt can count.

        Returns
        -------
        list of Block
            Well-formed blocks whose :attr:`Block.dedupe_key` was not seen before.
        """
        seq = lines.splitlines() if isinstance(lines, str) else lines
        machine = self._machine(final=False)
        events: list[_Event] = []
        for i in range(max(start, 0), len(seq)):
            events.extend(machine.push(seq[i], i))
        self._screen_pending = machine.pending()
        return self._take(events)

    def latest(
        self, *, to: str | None = None, type: str | None = None, id: str | None = None
    ) -> Block | None:
        """The last well-formed block seen, optionally filtered by to/type/id."""
        for block in reversed(self.blocks):
            if (
                (to is None or block.to == to)
                and (type is None or block.type == type)
                and (id is None or block.id == id)
            ):
                return block
        return None


def parse_blocks(
    text: str | t.Sequence[str],
    *,
    nonce: str | None = None,
    start: int = 0,
    detect_echo: bool = True,
) -> ParseResult:
    """Find every distinct well-formed block in one screen or text.

    Examples
    --------
    >>> screen = '''❯ please plan
    ...
    ... ● Here is the plan.
    ...
    ...   [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]
    ...   <PLAN>
    ...   1. do the thing
    ...   2. check the thing
    ...      </PLAN>
    ...      [[/POLI:MSG]]'''
    >>> found = parse_blocks(screen)
    >>> [(b.to, b.type, b.id) for b in found.blocks]
    [('EXECUTER', 'plan', 'T1')]
    >>> found.blocks[0].body_lines
    ['1. do the thing', '2. check the thing']
    >>> parse_blocks(screen, nonce="a1b2c3").rejections[0].reason
    "header has no nonce (this turn's nonce is 'a1b2c3')"
    """
    parser = BlockParser(nonce=nonce, detect_echo=detect_echo)
    parser.scan_screen(text, start=start)
    return ParseResult(list(parser.blocks), list(parser.rejections))
