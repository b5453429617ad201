"""Screen lines and block headers: cleaning, gutters, header/close detection, JSON headers.

The line-level half of the message contract's parser (:mod:`politerm.protocol.parser`):
what a renderer does to one line (ANSI, overdraws, gutters) and how a header that wrapped
over several screen lines is put back together and validated against the JSON Schema.
"""

from __future__ import annotations

import functools
import importlib.resources
import itertools
import json
import re
import typing as t

from politerm.errors import BlockRejected, OldBlock

if t.TYPE_CHECKING:
    import jsonschema.protocols

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
    # Imported here: the views import this module for its line cleaning only, and jsonschema
    # is a tenth of ``poli dash``'s start.
    import jsonschema

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
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    politerm.errors.OldBlock: an old block, ignored as it should be (its nonce 'ab12' is not ...)
    """
    flat = all(type(v) in _FLAT for v in header.values())
    # A header is checked on every look while its block is on screen: a flat one (every
    # header politerm asks for) is checked against the schema once.
    problem = _flat_problem(tuple((k, type(v), v) for k, v in header.items())) if flat else None
    if problem is None and not flat:
        problem = _schema_problem(header)
    if problem:
        raise BlockRejected(problem)
    if nonce is not None:
        got = header.get("nonce")
        if got is None:
            msg = f"header has no nonce (this turn's nonce is {nonce!r})"
            raise BlockRejected(msg)
        if str(got).lower() != nonce.lower():
            # Every turn has its own nonce: a block with another one is from an earlier
            # turn (still on the screen or in the transcript), not a mistake of this one.
            msg = (
                f"an old block, ignored as it should be (its nonce {got!r} is not this "
                f"turn's {nonce!r})"
            )
            raise OldBlock(msg)


_FLAT = (str, int, float, bool, type(None))


@functools.lru_cache(maxsize=512)
def _flat_problem(items: tuple[tuple[str, type, t.Any], ...]) -> str:
    """:func:`_schema_problem` of a header whose values are all scalars (by value and type)."""
    return _schema_problem({k: v for k, _, v in items})


def _schema_problem(header: t.Mapping[str, t.Any]) -> str:
    """Why ``header`` does not fit the schema, as one line; "" when it does."""
    errors = sorted(_validator().iter_errors(dict(header)), key=lambda e: list(e.path))
    if not errors:
        return ""
    err = errors[0]
    if err.validator == "required":
        missing = [k for k in t.cast("list[str]", err.validator_value) if k not in header]
        return f"header misses required key {missing[0]!r}"
    where = ".".join(str(p) for p in err.path) or "(root)"
    return f"header key {where!r}: {err.message}"


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
