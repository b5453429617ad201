"""Block bodies and echoed prompts: what lies between the tags, and what the user typed.

A block inside the user's own echoed prompt (a primer quoting the format, a forwarded
message) is never the agent's answer; these helpers tell the two apart and cut a body out
of its gutter.
"""

from __future__ import annotations

import typing as t

from politerm.protocol.header import (
    _CLOSE_TAG_SUFFIX,
    _ECHO_BAR_BOTTOM,
    _ECHO_BAR_TOP,
    _ECHO_GLYPH,
    _ECHO_START,
    _FENCE,
    _OPEN_TAG_PREFIX,
    _TAG_LINE,
    GUTTER_CHARS,
    clean_line,
)


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
