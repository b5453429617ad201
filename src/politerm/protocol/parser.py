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

import copy
import dataclasses
import logging
import re
import typing as t

from politerm.errors import BlockRejected, OldBlock
from politerm.protocol.block import Block, resolve_file_body
from politerm.protocol.echo import _EchoTracker, extract_body, is_prompt_echo, last_prompt_line
from politerm.protocol.header import (
    _CLOSE,
    _CLOSE_ANYWHERE,
    _ECHO_GLYPH,
    _FENCE,
    _HEADER,
    _HEADER_FINAL,
    _TAG_LINE,
    GUTTER_CHARS,
    MAX_HEADER_LINES,
    _split_header,
    clean_line,
    header_schema,
    is_close_line,
    is_header_line,
    parse_header,
    strip_gutter,
    validate_header,
)

if t.TYPE_CHECKING:
    import pathlib

__all__ = [
    "GUTTER_CHARS",
    "MAX_HEADER_LINES",
    "BlockParser",
    "ParseResult",
    "Rejection",
    "clean_line",
    "extract_body",
    "header_schema",
    "is_close_line",
    "is_header_line",
    "is_prompt_echo",
    "last_prompt_line",
    "parse_blocks",
    "parse_header",
    "strip_gutter",
    "validate_header",
]

logger = logging.getLogger(__name__)


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
    old : bool
        A block of another turn (its nonce is not this turn's): ignored, as it should be,
        not a mistake of this turn.
    """

    line: int
    reason: str
    text: str = ""
    old: bool = False


class ParseResult(t.NamedTuple):
    """What :func:`parse_blocks` found."""

    blocks: list[Block]
    rejections: list[Rejection]


@dataclasses.dataclass
class _Candidate:
    line: int
    raw: list[str]
    header_parts: list[str]
    gutter: int
    echo: bool
    numbered: bool = False
    header: dict[str, t.Any] | None = None
    body: list[str] = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def text(self) -> str:
        return strip_gutter(self.raw[0])[:120]


_Event = Block | Rejection


# A code-block line number after the reply gutter: "   12 text" or a bare "   12".
_LINE_NO = re.compile(r"^([ ●•✦┃│⎿⏺]*?)(\d{1,5})(?: +|$)")
# A closing tag that kept its line number (a numbered block whose numbering was lost).
_NUMBERED_CLOSE = re.compile(r"^\d{1,5} +(?=[`*_]*\[{1,2}/POLI:MSG)")


class _Numbering:
    r"""Strips the line numbers Gemini CLI draws in code blocks (its default).

    Numbers are right-aligned, so they all end at one column, and a line the CLI wrapped
    continues at the text column with no number. A numbered block starts only on a
    numbered header line; it ends at the first line that is neither the next number nor
    a wrapped continuation.

    Examples
    --------
    >>> n = _Numbering()
    >>> n.strip('   9 [[POLI:MSG {"id":"T1"}]]')
    ('     [[POLI:MSG {"id":"T1"}]]', False)
    >>> n.strip("  10 1. a long line")
    ('     1. a long line', False)
    >>> n.strip("     that wrapped")
    ('     that wrapped', True)
    >>> n.strip("  11 [[/POLI:MSG]]")
    ('     [[/POLI:MSG]]', False)
    >>> n.strip("  End of plan.")
    ('  End of plan.', False)
    >>> n.active
    False
    """

    def __init__(self) -> None:
        #: The number expected on the next line of a numbered block, or None.
        self.next_no: int | None = None
        # The column just after the numbers of the current block.
        self.end = 0

    @property
    def active(self) -> bool:
        """Whether a numbered block is open."""
        return self.next_no is not None

    def strip(self, line: str) -> tuple[str, bool]:
        """Blank out ``line``'s number (keeping columns); also whether it is a wrap."""
        m = _LINE_NO.match(line)
        if self.next_no is not None:
            if m is not None and int(m.group(2)) == self.next_no and m.end(2) == self.end:
                self.next_no += 1
                return line[: m.start(2)] + " " * len(m.group(2)) + line[m.end(2) :], False
            text_col = self.end + 1
            if line[text_col:].strip() and not line[:text_col].strip(GUTTER_CHARS):
                return line, True
            self.next_no = None
            return line, False
        if m is None or not _HEADER.match(strip_gutter(line[m.end() :])):
            return line, False
        self.next_no = int(m.group(2)) + 1
        self.end = m.end(2)
        return line[: m.start(2)] + " " * len(m.group(2)) + line[m.end(2) :], False


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
        # Gemini numbers the lines of code blocks ("   1 [[POLI:MSG ...").
        self.numbering = _Numbering()
        # The last candidate an input box or prompt echo cut off (screens only).
        self.cut: Rejection | None = None

    def fork(self) -> _Machine:
        """A copy to go on from; only at a quiet point (no candidate open), so it is cheap."""
        assert self.cand is None
        twin = copy.copy(self)
        twin.echo = copy.copy(self.echo)
        twin.numbering = copy.copy(self.numbering)
        return twin

    def in_body(self) -> bool:
        return self.cand is not None and self.cand.header is not None

    def pending(self) -> Rejection | None:
        c = self.cand
        if c is None:
            return self.cut
        what = "no closing tag yet" if c.header is not None else "header not finished yet"
        return Rejection(c.line, what, c.text)

    def push(self, raw: str, index: int) -> list[_Event]:
        line, wrapped = self.numbering.strip(clean_line(raw))
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
            if wrapped and c.body:
                # The CLI wrapped the previous body line: put it back together.
                c.raw.append(line)
                c.body[-1] = f"{c.body[-1].rstrip()} {stripped}"
                return out
            if _CLOSE.match(stripped) or (
                c.numbered and _CLOSE.match(_NUMBERED_CLOSE.sub("", stripped))
            ):
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
                else:
                    # An input box under the reply: the block is still open as far as
                    # this screen shows.
                    self.cut = Rejection(c.line, "no closing tag yet", c.text)
                return out
            elif len(c.body) >= self.max_body_lines:
                out.append(self._reject(c, f"no closing tag within {self.max_body_lines} lines"))
                self.cand = c = None
            else:
                c.raw.append(line)
                c.body.append(line)
                return out
        if _HEADER.match(stripped):
            self.cut = None
            c = _Candidate(
                line=index,
                raw=[line],
                header_parts=[stripped],
                gutter=len(line) - len(stripped),
                echo=echo,
                numbered=self.numbering.active,
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
            return [Rejection(c.line, str(exc), c.text, isinstance(exc, OldBlock))]
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


_MARK_EVERY = 256
"""Lines between two saved states of a screen scan (at the first quiet line after)."""


@dataclasses.dataclass
class _ScreenMemo:
    """What the last :meth:`BlockParser.scan_screen` saw, to go on from where lines agree.

    A turn's window grows as the agent prints: each scan would otherwise parse the whole
    window again (a flood of output makes that seconds per output event). The parser is a
    deterministic machine over (line, index) pairs, so its state before line ``i`` depends
    only on the lines before ``i``: where the new lines agree with the last scan's up to
    ``i``, the state saved there is the state a full scan would reach.
    """

    start: int
    nonce: str | None
    lines: t.Sequence[str]
    marks: list[tuple[int, _Machine]]
    #: File-referenced blocks whose body could not be read yet: a full scan would meet
    #: them again and retry, so a scan that skips their lines retries them itself.
    unresolved: list[Block]
    #: Complete blocks this scan saw (reported or not), for ``settle``: the next scan
    #: reports a block only if it is among these.
    seen_now: list[Block] = dataclasses.field(default_factory=list)


def common_prefix(a: t.Sequence[str], b: t.Sequence[str]) -> int:
    """How many leading items ``a`` and ``b`` share.

    Examples
    --------
    >>> common_prefix(["x", "y", "z"], ["x", "y", "w", "v"]), common_prefix([], ["x"])
    (2, 0)
    """
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


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
    settle : bool
        Report a screen block only once two scans in a row saw it the same (its
        :attr:`Block.dedupe_key`). A full-screen CLI repaints its reply cell by cell
        while it lays it out anew (opencode drew ``1.`` without the item's text for a
        moment), and a capture between two writes shows a block half drawn but closed.
        Off for one-shot scans (:func:`parse_blocks`); :meth:`feed` is not affected.

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
        settle: bool = False,
    ) -> None:
        self.nonce = nonce
        self.settle = settle
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
        self._memo: _ScreenMemo | None = None
        # The dedupe keys of the complete blocks the last screen scan saw (for ``settle``).
        self._last_seen: set[str] = set()

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

    def _take(
        self, events: t.Iterable[_Event], unresolved: list[Block] | None = None
    ) -> list[Block]:
        """The new blocks among ``events`` (rejections recorded).

        A file block whose body cannot be read yet goes to ``unresolved`` (a screen scan's).
        """
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
                    if unresolved is not None:
                        unresolved.append(ev)
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
        first = max(start, 0)
        machine, at, marks, retry, before = self._resume(seq, first)
        self._memo = memo = _ScreenMemo(first, self.nonce, seq, marks, [])
        events: list[_Event] = list(retry)
        due = at + _MARK_EVERY
        for i in range(at, len(seq)):
            if i >= due and machine.cand is None:
                marks.append((i, machine.fork()))
                due = i + _MARK_EVERY
            events.extend(machine.push(seq[i], i))
        self._screen_pending = machine.pending()
        # Blocks above the resumed-from line are as the last scan saw them (same lines).
        memo.seen_now = before + [ev for ev in events if isinstance(ev, Block)]
        if self.settle:
            last, self._last_seen = self._last_seen, {b.dedupe_key for b in memo.seen_now}
            # A block the last scan did not see the same may be half drawn: wait for one
            # more scan (it repeats what was skipped above ``at``, so nothing is lost).
            events = [ev for ev in events if not isinstance(ev, Block) or ev.dedupe_key in last]
        return self._take(events, memo.unresolved)

    @property
    def unsettled(self) -> list[Block]:
        """Complete blocks the last screen scan saw once and ``settle`` still holds back."""
        if not self.settle or self._memo is None:
            return []
        return [b for b in self._memo.seen_now if b.dedupe_key not in self._seen]

    def _resume(
        self, seq: t.Sequence[str], first: int
    ) -> tuple[_Machine, int, list[tuple[int, _Machine]], list[Block], list[Block]]:
        """Where a scan of ``seq`` goes on: the machine, its line, the saved states before.

        From the last saved state of the previous scan whose lines ``seq`` repeats (with
        the unresolved file blocks met before it, to retry, and every complete block met
        before it), else from ``first`` anew.
        """
        memo = self._memo
        if memo is None or memo.start != first or memo.nonce != self.nonce:
            return self._machine(final=False), first, [], [], []
        agree = first + common_prefix(seq[first:], memo.lines[first:])
        marks = [(i, m) for i, m in memo.marks if i <= agree]
        if not marks:
            return self._machine(final=False), first, [], [], []
        at, machine = marks[-1]
        retry = [b for b in memo.unresolved if b.line < at]
        before = [b for b in memo.seen_now if b.line < at]
        # A held (not yet reported) block above ``at`` is seen again the same: report it.
        held = [
            b for b in before if self.settle and b.dedupe_key not in self._seen and b not in retry
        ]
        return machine.fork(), at, marks, retry + held, before

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
