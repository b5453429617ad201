"""Pure text helpers of the fake agent: cell widths, sanitising, wrapping, list re-indent.

Everything here works on ``str`` and has no terminal or I/O side; the screen code in
:mod:`politerm.testing.fakeagent.render` builds on it.
"""

from __future__ import annotations

import re
import typing as t
import unicodedata

_TEMPLATE_RE = re.compile(r"\{(\w+)\}")
_LIST_ITEM_RE = re.compile(r"^(\s*)((?:\d{1,3}[.)])|[-*+])\s+\S")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


def cell_width(text: str) -> int:
    """Terminal cells ``text`` occupies (wide East Asian characters count 2).

    Examples
    --------
    >>> cell_width("abc")
    3
    >>> cell_width("日本")
    4
    >>> cell_width("e\u0301")
    1
    """
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def truncate(text: str, width: int) -> str:
    """Cut ``text`` to at most ``width`` cells.

    Examples
    --------
    >>> truncate("hello", 3)
    'hel'
    >>> truncate("日本語", 5)
    '日本'
    """
    if len(text) <= width and text.isascii():
        return text
    out: list[str] = []
    used = 0
    for ch in text:
        w = cell_width(ch)
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out)


def sanitize(text: str) -> str:
    r"""Make ``text`` safe to write to a terminal: no control byte reaches tmux.

    A pasted ``ESC [ 2 J`` must show up as text, never clear the screen, so C0/C1
    controls become caret notation; a tab becomes two spaces; newlines are kept.

    Examples
    --------
    >>> sanitize("a\x1b[31mb\tc\x03")
    'a^[[31mb  c^C'
    >>> sanitize("line\nnext")
    'line\nnext'
    """
    if text.isprintable() or all(ch == "\n" or ch.isprintable() for ch in text):
        return text
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append("  ")
        elif code < 0x20:
            out.append("^" + chr(code + 0x40))
        elif code == 0x7F:
            out.append("^?")
        elif 0x80 <= code < 0xA0 or unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn"):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def render_template(template: str, values: t.Mapping[str, object]) -> str:
    """Replace ``{name}`` for known names; every other brace stays literal.

    ``str.format`` would choke on the JSON headers replies carry (``{"to": …}``), so
    only ``{identifier}`` with a known identifier is substituted.

    Examples
    --------
    >>> render_template('[[MSG {"id":"{id}"}]] {n} {unknown}', {"id": "T1", "n": 2})
    '[[MSG {"id":"T1"}]] 2 {unknown}'
    """

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        return str(values[name]) if name in values else m.group(0)

    return _TEMPLATE_RE.sub(sub, template)


def wrap(text: str, width: int, first_prefix: str = "", cont_prefix: str = "") -> list[str]:
    """Wrap one logical line at word boundaries, as the real CLIs do on screen.

    The first row starts with ``first_prefix``, every following row with
    ``cont_prefix``; the line's own leading blanks are kept on its first row only.
    A word longer than a row is broken hard.

    Examples
    --------
    >>> wrap("alpha bravo charlie delta", 14, "● ", "  ")
    ['● alpha bravo', '  charlie', '  delta']
    >>> wrap("", 10, "• ", "  ")
    ['•']
    >>> wrap("abcdefghij", 6, "", "  ")
    ['abcdef', '  ghij']
    """
    first_room = max(1, width - cell_width(first_prefix))
    cont_room = max(1, width - cell_width(cont_prefix))
    if cell_width(text) <= first_room:
        return [(first_prefix + text).rstrip()] if text else [first_prefix.rstrip()]
    rows: list[str] = []
    room = first_room
    current = ""
    for token in re.findall(r"\s+|\S+", text):
        if not current and rows and token.isspace():
            continue  # a break eats the blanks at it
        if cell_width(current) + cell_width(token) <= room:
            current += token
            continue
        if token.isspace():
            rows.append(current)
            current, room = "", cont_room
            continue
        if current.strip():
            rows.append(current)
            current, room = "", cont_room
        while cell_width(token) > room:
            head = truncate(token, room)
            rows.append(current + head)
            token = token[len(head) :]
            current, room = "", cont_room
        current += token
    if current or not rows:
        rows.append(current)
    return [
        ((first_prefix if i == 0 else cont_prefix) + row).rstrip() for i, row in enumerate(rows)
    ]


def reindent_lists(lines: t.Sequence[str]) -> list[str]:
    """Indent lazy continuation lines of a markdown list item, as Codex renders them.

    A non-blank, non-list line right after a list item (up to the next blank line)
    is shown as part of that item, indented by the item marker's width. Fenced code
    is left alone.

    Examples
    --------
    >>> reindent_lists(["<PLAN>", "1. do", "2. check", "</PLAN>", "[[/M]]", "", "end"])
    ['<PLAN>', '1. do', '2. check', '   </PLAN>', '   [[/M]]', '', 'end']
    >>> reindent_lists(["- a", "b"])
    ['- a', '  b']
    """
    out: list[str] = []
    indent: str | None = None
    in_fence = False
    for line in lines:
        if _FENCE_RE.match(line):
            in_fence = not in_fence
            indent = None
            out.append(line)
            continue
        if in_fence:
            out.append(line)
            continue
        m = _LIST_ITEM_RE.match(line)
        if m:
            indent = " " * (len(m.group(1)) + len(m.group(2)) + 1)
            out.append(line)
        elif not line.strip():
            indent = None
            out.append(line)
        elif indent is not None:
            out.append(indent + line.lstrip())
        else:
            out.append(line)
    return out


def strip_fences(lines: t.Sequence[str]) -> list[str]:
    """Drop the fence lines of fenced code blocks, keeping their content.

    Claude, Codex and Gemini draw a code block's content without its fence markers.

    Examples
    --------
    >>> strip_fences(["text", "```json", "{}", "```", "after"])
    ['text', '{}', 'after']
    """
    return [line for line in lines if not _FENCE_RE.match(line)]
