"""Instruction text that tells an agent how to emit a block.

The prompt we send is echoed on the agent's screen. If it held a complete block with this
turn's nonce, the echo would be indistinguishable from the reply. So the primer shows the
block's shape with placeholders (``<TO>``, ``<NONCE>`` ...), which the header schema
refuses, and states the real values separately. :func:`render_primer` is checked against
the parser in the tests: its output never parses as a block.
"""

from __future__ import annotations

import json
import secrets

from politerm.protocol.block import CLOSE_TAG, INNER_TAGS, OPEN_TAG

#: Above this many lines the body goes to a file in the message folder.
DEFAULT_MAX_SCREEN_LINES = 40


def new_nonce(nbytes: int = 3) -> str:
    """A fresh per-turn nonce: ``nbytes`` random bytes as lower-case hex.

    Examples
    --------
    >>> len(new_nonce()), all(c in "0123456789abcdef" for c in new_nonce())
    (6, True)
    """
    return secrets.token_hex(nbytes)


def inner_tag(msg_type: str) -> str:
    """The conventional inner tag for a message type (``plan`` → ``PLAN``).

    Examples
    --------
    >>> inner_tag("plan"), inner_tag("final"), inner_tag("ack")
    ('PLAN', 'REPORT', 'ACK')
    """
    return INNER_TAGS.get(msg_type, msg_type.upper() or "BODY")


def header_template(*, with_nonce: bool = True, with_file: bool = False) -> str:
    """The header line with placeholders instead of values.

    Examples
    --------
    >>> header_template()
    '[[POLI:MSG {"to":"<TO>","type":"<TYPE>","id":"<ID>","nonce":"<NONCE>"}]]'
    >>> header_template(with_nonce=False, with_file=True)
    '[[POLI:MSG {"to":"<TO>","type":"<TYPE>","id":"<ID>","file":"<FILE>"}]]'
    """
    fields = {"to": "<TO>", "type": "<TYPE>", "id": "<ID>"}
    if with_nonce:
        fields["nonce"] = "<NONCE>"
    if with_file:
        fields["file"] = "<FILE>"
    return f"[[{OPEN_TAG} {json.dumps(fields, separators=(',', ':'))}]]"


def render_primer(
    to: str,
    msg_type: str,
    msg_id: str,
    nonce: str | None = None,
    *,
    file_ref: str | None = None,
    max_screen_lines: int = DEFAULT_MAX_SCREEN_LINES,
    what: str | None = None,
) -> str:
    """Render the instructions for one reply block.

    Parameters
    ----------
    to, msg_type, msg_id : str
        The values the agent must put in the header.
    nonce : str, optional
        This turn's nonce; stated on its own line, never inside a header.
    file_ref : str, optional
        Where a long body goes, relative to the session folder (``msgs/T1-plan.md``).
        Without it, the agent is told to keep the body on screen.
    max_screen_lines : int
        Body length above which the file is used.
    what : str, optional
        One phrase on what the body should contain (``your numbered plan``).

    Returns
    -------
    str
        Plain text, ready to be appended to a prompt.

    Examples
    --------
    >>> text = render_primer("EXECUTER", "plan", "T1", "a1b2c3")
    >>> "<NONCE> = a1b2c3" in text, '"nonce":"a1b2c3"' in text
    (True, False)
    >>> print(text.splitlines()[0])
    When you are done, end your reply with exactly one message block, inside a ``` code block:
    """
    tag = inner_tag(msg_type)
    values = [f"  <TO> = {to}", f"  <TYPE> = {msg_type}", f"  <ID> = {msg_id}"]
    if nonce is not None:
        values.append(f"  <NONCE> = {nonce}")
    lines = [
        (
            "When you are done, end your reply with exactly one message block, "
            "inside a ``` code block:"
        ),
        "",
        "```",
        header_template(with_nonce=nonce is not None),
        f"<{tag}>",
        what or "...",
        f"</{tag}>",
        f"[[{CLOSE_TAG}]]",
        "```",
        "",
        "Replace each placeholder in the first line with its value (keep the double quotes):",
        *values,
        "",
        "Rules:",
        "- The first line is one line of JSON: no line breaks, no `*`, `_` or backticks in it.",
        f"- Put the text between <{tag}> and </{tag}>; plain text and numbered lists are fine.",
        f"- The last line is [[{CLOSE_TAG}]] on its own.",
    ]
    if nonce is not None:
        lines.append("- The nonce is for this reply only; never reuse one from an earlier message.")
    if file_ref is not None:
        lines.append(
            f"- If the text is longer than {max_screen_lines} lines, write it to the file "
            f"{file_ref} instead, add the key file with the value {file_ref} to the JSON "
            f"(after the id), and put a one-line summary between the tags."
        )
    else:
        lines.append(f"- Keep the text under {max_screen_lines} lines.")
    lines.append("- Write nothing after the closing line.")
    return "\n".join(lines)
