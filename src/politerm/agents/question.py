"""The tool-permission question that is open on a screen, and what it asks to run.

An approval is identified by the question actually open, never by one answered above it.
A line REPL (aider) leaves every answered question on screen (``… [Yes]: y``) and asks the
next one below it ("Add command output to the chat?" right after "Run shell command?"), so:

- the open question is the lowest line the approval detectors match in the detector
  region, and for a line REPL (input at the cursor) nothing may follow it: anything below
  it ("Running …") means it was answered, even with Enter alone;
- with ``approval.box_top`` set, the command is read only from the question's own box: from
  the nearest line above the question that matches ``box_top`` down to the question, whose
  line the ``command`` regex must end on. The command of an answered question above, or a
  question printed by a command's output, never stands in for the open one.

aider prints its command between an empty line and the question, and a command may hold
blank lines of its own. It pads a multi-line command's lines with spaces to one length, so
on a terminal that keeps trailing spaces (a tmux pane) an inner blank line is a line of
spaces and the empty line above is the box's top (``approval.padded``). What cannot be read
with certainty — lines of unequal length, a terminal that drops trailing spaces, fewer or
more lines to run than the question says (``asks_one``/``asks_many``) — is incomplete, and
a pattern never approves it.

A TUI draws the question in a box that may be taller than the detector region and the
screen (Claude Code's "Bash command" box around a 150-line heredoc). When the box's top is
not among the lines read, the request is marked incomplete (no command) and the driver
reads it again together with the terminal's history (:mod:`politerm.driver.approvals`).

A request whose command is empty is never complete: a question whose command cannot be
read (the ``command`` regex does not match its box) carries the screen lines above it as
its evidence, so whoever answers it sees what was there. A *follow-up* question
(``approval.follow_up``: aider's "Add command output to the chat?") asks about the command
just decided, not a command of its own; the approver gives it that command's verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import textwrap
import typing as t
from collections.abc import Sequence

import pydantic

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile


class ApprovalSpec(pydantic.BaseModel):
    """How a tool-permission question is read and answered.

    Attributes
    ----------
    approve, deny
        Keys that answer the question (``["y"]``, ``["Escape"]``).
    command
        Regex (or list of regexes) searched in the question's text; the ``command`` group
        is what the agent wants to run (matched by ``approval_patterns``), an optional
        ``tool`` group names the tool. The lowest match wins.
    box_top
        Regex for the first line of the question's box. The command is then read only
        from that line down to the question (never from an answered question above), and
        from the terminal's history when the box is taller than the screen; the
        ``command`` regex is matched from that line and must end on the question's line.
        Without it the command is searched in the detector region.
    padded
        The CLI pads the lines of a multi-line command with spaces to one length (aider):
        ``box_top`` is then matched with each line's trailing spaces kept (``^$`` is an
        empty line, never a blank line of the command), and a command of several lines is
        read with certainty only from a terminal that keeps trailing spaces, with its lines
        of one length.
    follow_up
        Regexes on the open question's line naming questions that follow a command and
        ask none of their own (aider's "Add command output to the chat?"); such a
        question gets the verdict of the command decided right before it.
    asks_one, asks_many
        Regexes on the open question saying that it runs one line, or several (a blank
        line or a ``#`` comment is not run): a command read with another count of lines to
        run was not read whole.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    approve: list[str] = ["Enter"]
    deny: list[str] = ["Escape"]
    command: str | list[str] | None = None
    box_top: str | None = None
    padded: bool = False
    asks_one: str | None = None
    asks_many: str | None = None
    follow_up: list[str] = []

    @property
    def commands(self) -> list[str]:
        """The command regexes as a list."""
        if self.command is None:
            return []
        return [self.command] if isinstance(self.command, str) else list(self.command)

    @pydantic.model_validator(mode="after")
    def _check(self) -> ApprovalSpec:
        _check_regexes(self.commands, "approval.command")
        if any("(?P<command>" not in c for c in self.commands):
            msg = "approval.command: needs a (?P<command>...) group"
            raise ValueError(msg)
        for key in ("box_top", "asks_one", "asks_many"):
            value = getattr(self, key)
            if value is not None:
                _check_regexes([value], f"approval.{key}")
        _check_regexes(self.follow_up, "approval.follow_up")
        return self


def _check_regexes(patterns: Sequence[str], where: str) -> None:
    for p in patterns:
        try:
            re.compile(p, re.MULTILINE)
        except re.error as exc:
            msg = f"{where}: bad regex {p!r}: {exc}"
            raise ValueError(msg) from None


@dataclasses.dataclass(frozen=True)
class ApprovalRequest:
    """A tool-permission question seen on screen: what the agent wants to run.

    Attributes
    ----------
    tool, command
        The tool and the command (or file path) it asks about; ``""`` when not read.
    evidence
        The screen lines the question was recognised on.
    question
        The open question's line (``Run shell command? (Y)es/(N)o … [Yes]:``).
    complete
        False when the command could not be read in full with certainty (the top of the
        question's box scrolled away, the lines read may be only its tail, or no command
        was read at all); the command is then ``""``.
    doubt
        Why it is incomplete.
    follow_up
        The question follows the command decided before it and asks none of its own
        (``approval.follow_up``).
    unmatched
        The profile's command regex matched nothing where the command belongs: the box
        may still be being drawn (a CLI under load draws the question before its command).
    """

    tool: str
    command: str
    evidence: tuple[str, ...]
    question: str = ""
    complete: bool = True
    doubt: str = ""
    follow_up: bool = False
    unmatched: bool = False


@dataclasses.dataclass(frozen=True)
class OpenQuestion:
    """The open question: its first line's index in the lines read, its text, the rule."""

    index: int
    line: str
    rule: str


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.MULTILINE) for p in patterns)


def _trimmed_end(lines: Sequence[str]) -> int:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return end


def find_open_question(
    patterns: Sequence[str],
    lines: Sequence[str],
    *,
    region_lines: int = 0,
    last_line: bool = False,
) -> OpenQuestion | None:
    r"""The lowest question the ``patterns`` match in the last ``region_lines`` lines.

    With ``last_line`` (a line REPL, which asks at the bottom) the question must end on the
    last non-blank line; otherwise it was answered and nothing is open. (Not the cursor's
    row: a joined capture, ``-J``, numbers lines differently from the screen's rows.)

    Examples
    --------
    >>> pats = [r"\(Y\)es/\(N\)o.*\[(?:Yes|No)\]: *$"]
    >>> screen = ["echo hi", "Run? (Y)es/(N)o [Yes]: y", "hi", "Add output? (Y)es/(N)o [Yes]: "]
    >>> find_open_question(pats, screen, last_line=True).line
    'Add output? (Y)es/(N)o [Yes]:'
    >>> find_open_question(pats, [*screen, "Running x"], last_line=True) is None
    True
    """
    end = _trimmed_end(lines)
    start = max(0, end - region_lines) if region_lines else 0
    text = "\n".join(ln.rstrip() for ln in lines[start:end])
    best: tuple[re.Match[str], re.Pattern[str]] | None = None
    for rx in _compiled(tuple(patterns)):
        for m in rx.finditer(text):
            if best is None or m.start() > best[0].start():
                best = (m, rx)
    if best is None:
        return None
    m, rx = best
    first = start + text.count("\n", 0, m.start())
    last = start + text.count("\n", 0, max(m.start(), m.end() - 1))
    if last_line and last != end - 1:
        return None
    return OpenQuestion(first, lines[first].strip(), f"approval: {rx.pattern}")


def open_question(profile: AgentProfile, lines: Sequence[str]) -> OpenQuestion | None:
    """:func:`find_open_question` with the profile's detectors."""
    d = profile.detectors
    return find_open_question(
        d.approval,
        lines,
        region_lines=d.region_lines,
        last_line=d.input_at_cursor,
    )


def box_of(box_top: str, lines: Sequence[str], index: int, *, raw: bool = False) -> int | None:
    """The index of the nearest line at or above ``index`` matching ``box_top``, if any.

    Each line is matched without its trailing spaces, or as it is with ``raw``.

    Examples
    --------
    >>> box_of(r"^$", ["Running x", "", "echo hi", "Run shell command?"], 3)
    1
    >>> box_of(r"^$", ["", "echo a", "      ", "echo b", "Run shell commands?"], 4, raw=True)
    0
    >>> box_of(r"^ Bash command$", ["   line 9", " Do you want to proceed?"], 1) is None
    True
    """
    (rx,) = _compiled((box_top,))
    for i in range(index, -1, -1):
        if rx.search(lines[i] if raw else lines[i].rstrip()):
            return i
    return None


def read_request(
    profile: AgentProfile, lines: Sequence[str], *, trailing_spaces: bool = True
) -> ApprovalRequest | None:
    """What the open question in ``lines`` asks to run; None when no question is open.

    ``lines`` is the screen, or the history followed by the screen; ``trailing_spaces``
    says whether they keep the spaces the program wrote at their ends (a tmux capture
    does; a PTY's rendered screen is right-stripped). A request with no command read is
    incomplete, with the screen lines above its question as evidence.
    """
    q = open_question(profile, lines)
    if q is None:
        return None
    spec = profile.approval
    if any(re.search(rx, q.line) for rx in spec.follow_up):
        why = "it follows the command decided before it and names none of its own"
        return ApprovalRequest("", "", (q.line,), q.line, complete=False, doubt=why, follow_up=True)
    start = 0
    if spec.box_top is not None:
        top = box_of(spec.box_top, lines, q.index, raw=spec.padded)
        if top is None:
            doubt = "the top of the question's box is not among the lines read"
            return _unread(lines, q, 0, doubt)
        start, end = top, q.index + 1
    else:
        end = _trimmed_end(lines)
        region = profile.detectors.region_lines
        start = max(0, end - region) if region else 0
    if not spec.commands:
        return _unread(lines, q, start, "the profile has no [approval] command regex")
    text = "\n".join(ln.rstrip() for ln in lines[start:end])
    found = _command_match(spec, text, box=spec.box_top is not None)
    # In a box, the command belongs to the open question only when the match ends on it.
    if found is None or (
        spec.box_top is not None and start + text.count("\n", 0, found.end()) != q.index
    ):
        where = "its box" if spec.box_top is not None else "the lines above it"
        return _unread(lines, q, start, f"no command could be read from {where}", unmatched=True)
    groups = found.groupdict()
    command = command_text(groups.get("command") or "")
    tool = (groups.get("tool") or "").strip()
    # The screen line the command starts on (its first non-blank one) backs the reading.
    below = text[text.rfind("\n", 0, found.start("command")) + 1 :].split("\n")
    first = next((ln.strip() for ln in below if ln.strip()), "")
    evidence = tuple(dict.fromkeys((q.line, first)))
    body = lines[start + 1 : q.index] if spec.box_top is not None else ()
    doubt = _doubt(spec, q.line, body, command, trailing_spaces=trailing_spaces)
    if not doubt and not command:
        doubt = "the command read is empty"
    if doubt:
        return ApprovalRequest(tool, "", evidence, q.line, complete=False, doubt=doubt)
    return ApprovalRequest(tool, command, evidence, q.line)


# The screen lines kept as evidence of a question whose command could not be read.
_UNREAD_LINES = 8


def _unread(
    lines: Sequence[str], q: OpenQuestion, start: int, doubt: str, *, unmatched: bool = False
) -> ApprovalRequest:
    """A question whose command was not read: its evidence is the lines just above it."""
    above = [ln.strip() for ln in lines[start : q.index] if ln.strip()][-_UNREAD_LINES:]
    evidence = tuple(dict.fromkeys((q.line, *above)))
    return ApprovalRequest(
        "", "", evidence, q.line, complete=False, doubt=doubt, unmatched=unmatched
    )


def _command_match(spec: ApprovalSpec, text: str, *, box: bool) -> re.Match[str] | None:
    """The ``command`` regex's match: from a box's top line, else the lowest one."""
    found: re.Match[str] | None = None
    for rx in _compiled(tuple(spec.commands)):
        if box:
            # Anchored at the top: a question-like line inside the box (printed by the
            # command, or part of it) cannot start a shorter match below it.
            if (m := rx.match(text)) is not None:
                return m
            continue
        for m in rx.finditer(text):
            if found is None or m.start() > found.start():
                found = m
    return found


def _runnable(command: str) -> int:
    return sum(1 for ln in command.split("\n") if ln.strip() and not ln.strip().startswith("#"))


def _doubt(
    spec: ApprovalSpec,
    question: str,
    body: Sequence[str],
    command: str,
    *,
    trailing_spaces: bool,
) -> str:
    """Why the command read between a box's top and its question may not be all of it."""
    if spec.padded and len(body) > 1:
        if not trailing_spaces:
            return (
                "the terminal drops trailing spaces, so a blank line inside the command "
                "looks like the empty line above it"
            )
        if len({len(ln) for ln in body}) > 1:
            return "its lines are not padded to one length, so it may start above them"
    lines = _runnable(command)
    if spec.asks_one is not None and re.search(spec.asks_one, question) and lines != 1:
        return f"the question runs one line, {lines} read"
    if spec.asks_many is not None and re.search(spec.asks_many, question) and lines < 2:
        return f"the question runs several lines, {lines} read"
    return ""


def command_text(raw: str) -> str:
    r"""A command read off the screen: its box indent removed, blank edges dropped.

    Examples
    --------
    >>> command_text("   cat > f <<'EOF'\n   a\n\n   EOF\n")
    "cat > f <<'EOF'\na\n\nEOF"
    >>> command_text("  echo   hi  ")
    'echo   hi'
    """
    lines = [ln.rstrip() for ln in textwrap.dedent(raw).split("\n")]
    return "\n".join(lines).strip("\n").strip()
