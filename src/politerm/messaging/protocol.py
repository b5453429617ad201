"""The text of the pane-to-pane protocol: the request a worker reads, the line it answers with.

A request, as agents primed for the original protocol expect it::

    [WORKER capability=READONLY to=%5]
    {task content}

    [RESPONSE]
    Dir: <messages dir>
    Command: <how to notify the sender>

The worker answers by writing its response to a file in ``Dir`` and putting one line into
the sender's pane: ``[RESPONSE from=%5] <path>``. Everything here is pure text handling.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from politerm.store.mail import Capability

RESPONSE_LINE_RE: t.Final = re.compile(
    r"\[RESPONSE from=(?P<pane>%\d+)\][ \t]+(?P<path>\S[^\r\n]*)"
)
"""A response notification; the path runs to the end of the line."""

_CONTROL_RE: t.Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

READONLY_NOTE: t.Final = (
    "This request is READONLY: do not change any file. politerm denies write approvals "
    "for this turn."
)


@dataclasses.dataclass(frozen=True)
class ResponseLine:
    """One ``[RESPONSE from=%M] <path>`` line."""

    pane: str
    path: str


def pastable(body: str) -> bool:
    r"""Whether ``body`` can go into a pane as typed text: no control characters but LF and TAB.

    Examples
    --------
    >>> pastable("line 1\n\tline 2 $(rm -rf ~) [[POLI:MSG x]]")
    True
    >>> pastable("red \x1b[31m"), pastable("a\rb")
    (False, False)
    """
    return _CONTROL_RE.search(body) is None


def render_request(
    *,
    body: str,
    body_path: str,
    size: int,
    sha256: str,
    capability: Capability,
    to_pane: str,
    msg_id: str,
    msg_dir: str,
    sender: str,
    sender_pane: str | None,
) -> str:
    r"""The request text pasted into the receiver's pane.

    A body that cannot be typed into a pane (control characters) stays in its file and the
    request points to it, with its size and SHA-256.

    Examples
    --------
    >>> text = render_request(
    ...     body="list the files", body_path="/m/m-1.body", size=14, sha256="ab",
    ...     capability=Capability.WRITABLE, to_pane="%5", msg_id="m-1", msg_dir="/m",
    ...     sender="ORCH", sender_pane="%3",
    ... )
    >>> print(text)
    [WORKER capability=WRITABLE to=%5]
    Message m-1 from ORCH (pane %3).
    list the files
    <BLANKLINE>
    [RESPONSE]
    Dir: /m
    Command: poli reply --to m-1 <file>
    Or by hand: write <file> in Dir, then paste one line "[RESPONSE from=%5] <file>" into pane %3
    """
    lines = [
        f"[WORKER capability={capability.value.upper()} to={to_pane}]",
        marker_line(msg_id, sender, sender_pane),
    ]
    if capability is Capability.READONLY:
        lines.append(READONLY_NOTE)
    if pastable(body):
        lines.append(body.rstrip("\n"))
    else:
        lines.append(
            f"The task is in the file {body_path} ({size} bytes, sha256 {sha256}); "
            "read it from there."
        )
    lines += ["", "[RESPONSE]", f"Dir: {msg_dir}", f"Command: poli reply --to {msg_id} <file>"]
    if sender_pane:
        lines.append(
            "Or by hand: write <file> in Dir, then paste one line "
            f'"[RESPONSE from={to_pane}] <file>" into pane {sender_pane}'
        )
    return "\n".join(lines)


def marker_line(msg_id: str, sender: str, sender_pane: str | None) -> str:
    """The request's second line; on a receiver's screen it proves the request arrived.

    Examples
    --------
    >>> marker_line("m-1", "user", None)
    'Message m-1 from user.'
    """
    where = f" (pane {sender_pane})" if sender_pane else ""
    return f"Message {msg_id} from {sender}{where}."


def response_line(pane: str, path: str) -> str:
    """The notification a worker puts into the sender's pane.

    Examples
    --------
    >>> response_line("%5", "/m/m-1.response")
    '[RESPONSE from=%5] /m/m-1.response'
    """
    return f"[RESPONSE from={pane}] {path}"


def find_response_lines(text: str) -> list[ResponseLine]:
    r"""Every response notification in a screen or transcript, in order, without repeats.

    Examples
    --------
    >>> find_response_lines("> [RESPONSE from=%5] /m/a.response\nnoise\n")
    [ResponseLine(pane='%5', path='/m/a.response')]
    >>> find_response_lines("[RESPONSE from=me] x")
    []
    """
    seen: list[ResponseLine] = []
    for m in RESPONSE_LINE_RE.finditer(text):
        line = ResponseLine(m["pane"], m["path"].rstrip())
        if line not in seen:
            seen.append(line)
    return seen
