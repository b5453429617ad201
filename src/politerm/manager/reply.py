"""What the brain answered: an instruction, a question, the end of the task, or an error.

A marker counts only at the very start of the reply (after whitespace); a marker anywhere
else is just part of an instruction, so a brain quoting ``TASK_COMPLETE`` in prose cannot end
a task by accident.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from politerm.errors import BrainReplyError

# CSI/OSC/other escape sequences and C0/C1 controls except tab and newline: a reply is data
# that may be printed on the user's terminal, never instructions to it.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL/ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)
_MARKER = re.compile(
    r"^(?P<marker>NEED_USER_INPUT|TASK_COMPLETE|SYSTEM_ERROR)(?![A-Za-z0-9_])[ \t]*:?[ \t]*"
)


class ReplyKind(str, enum.Enum):
    """The four kinds of brain reply."""

    INSTRUCTION = "instruction"
    NEED_USER_INPUT = "need_user_input"
    TASK_COMPLETE = "task_complete"
    SYSTEM_ERROR = "system_error"


@dataclasses.dataclass(frozen=True)
class Reply:
    """A parsed brain reply: its kind and its text (the marker removed)."""

    kind: ReplyKind
    text: str


def clean_text(text: str) -> str:
    r"""Remove terminal control sequences and stray control characters; keep tabs and newlines.

    Examples
    --------
    >>> clean_text("ok\x1b[2J\x1b]0;title\x07 done\r\n")
    'ok done\n'
    """
    return _ESCAPES.sub("", text.replace("\r\n", "\n"))


def parse_reply(raw: str) -> Reply:
    """Read one brain reply.

    Parameters
    ----------
    raw
        The reply as the model (or agent) gave it.

    Returns
    -------
    Reply
        ``NEED_USER_INPUT: question``, ``TASK_COMPLETE summary`` and ``SYSTEM_ERROR: reason``
        at the start; anything else is an instruction for the dev agent.

    Raises
    ------
    BrainReplyError
        Empty (after removing control characters), or a question or error marker with
        nothing after it.

    Examples
    --------
    >>> parse_reply("  NEED_USER_INPUT: Which database?")
    Reply(kind=<ReplyKind.NEED_USER_INPUT: 'need_user_input'>, text='Which database?')
    >>> parse_reply("TASK_COMPLETE all tests pass").kind.name
    'TASK_COMPLETE'
    >>> parse_reply("Add a test. Then say TASK_COMPLETE.").kind.name
    'INSTRUCTION'
    >>> parse_reply("TASK_COMPLETED the work").kind.name
    'INSTRUCTION'
    >>> parse_reply("   ")
    Traceback (most recent call last):
    ...
    politerm.errors.BrainReplyError: the brain's reply is empty
    """
    text = clean_text(raw).strip()
    if not text:
        msg = "the brain's reply is empty"
        raise BrainReplyError(msg)
    m = _MARKER.match(text)
    if m is None:
        return Reply(ReplyKind.INSTRUCTION, text)
    kind = ReplyKind(m.group("marker").lower())
    rest = text[m.end() :].strip()
    if not rest and kind is not ReplyKind.TASK_COMPLETE:
        msg = f"the brain's reply {text!r} has a {m.group('marker')} marker and nothing after it"
        raise BrainReplyError(msg)
    return Reply(kind, rest)
