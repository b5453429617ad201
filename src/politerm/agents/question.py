"""The tool-permission question that is open on a screen, and what it asks to run.

An approval is identified by the question actually open, never by one answered above it.
A line REPL (aider) leaves every answered question on screen (``… [Yes]: y``) and asks the
next one below it ("Add command output to the chat?" right after "Run shell command?"), so:

- the open question is the lowest line the approval detectors match in the detector
  region, and for a line REPL (input at the cursor) nothing may follow it: anything below
  it ("Running …") means it was answered, even with Enter alone;
- with ``approval.box_top`` set, the command is read only from the question's own box: from
  the nearest line above the question that matches ``box_top`` down to the end of the
  screen. The command of an answered question above never stands in for the open one.

A TUI draws the question in a box that may be taller than the detector region and the
screen (Claude Code's "Bash command" box around a 150-line heredoc). When the box's top is
not among the lines read, the request is marked incomplete (no command) and the driver
reads it again together with the terminal's history (:mod:`politerm.driver.approvals`).
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
        from that line to the end of the screen (never from an answered question above),
        and from the terminal's history when the box is taller than the screen. Without
        it the command is searched in the detector region.
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    approve: list[str] = ["Enter"]
    deny: list[str] = ["Escape"]
    command: str | list[str] | None = None
    box_top: str | None = None

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
        if self.box_top is not None:
            _check_regexes([self.box_top], "approval.box_top")
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
        False when the question's box starts above the lines read (its top scrolled
        away), so the command could not be read in full.
    """

    tool: str
    command: str
    evidence: tuple[str, ...]
    question: str = ""
    complete: bool = True


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


def box_of(box_top: str, lines: Sequence[str], index: int) -> int | None:
    """The index of the nearest line at or above ``index`` matching ``box_top``, if any.

    Examples
    --------
    >>> box_of(r"^$", ["Running x", "", "echo hi", "Run shell command?"], 3)
    1
    >>> box_of(r"^ Bash command$", ["   line 9", " Do you want to proceed?"], 1) is None
    True
    """
    (rx,) = _compiled((box_top,))
    for i in range(index, -1, -1):
        if rx.search(lines[i].rstrip()):
            return i
    return None


def read_request(profile: AgentProfile, lines: Sequence[str]) -> ApprovalRequest | None:
    """What the open question in ``lines`` asks to run; None when no question is open.

    ``lines`` is the screen, or the history followed by the screen.
    """
    q = open_question(profile, lines)
    if q is None:
        return None
    spec = profile.approval
    if spec.box_top is not None:
        top = box_of(spec.box_top, lines, q.index)
        if top is None:
            return ApprovalRequest("", "", (q.line,), q.line, complete=False)
        scope = lines[top : _trimmed_end(lines)]
    else:
        end = _trimmed_end(lines)
        region = profile.detectors.region_lines
        scope = lines[max(0, end - region) if region else 0 : end]
    text = "\n".join(ln.rstrip() for ln in scope)
    found: re.Match[str] | None = None
    for rx in _compiled(tuple(spec.commands)):
        for m in rx.finditer(text):
            if found is None or m.start() > found.start():
                found = m
    if found is None:
        return ApprovalRequest("", "", (q.line,), q.line)
    groups = found.groupdict()
    command = command_text(groups.get("command") or "")
    tool = (groups.get("tool") or "").strip()
    at = text.rfind("\n", 0, found.start("command")) + 1
    first = text[at : text.find("\n", at) if "\n" in text[at:] else len(text)].strip()
    evidence = tuple(dict.fromkeys((q.line, first)))
    return ApprovalRequest(tool, command, evidence, q.line)


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
