"""Which request a response line on a sender's screen answers, if any.

A response line ``[RESPONSE from=%N] <path>`` stays on the sender's screen after it was
taken, and a postman that starts later reads it again; the sender's next request to the same
worker must never take that old answer. A line answers a request only when all three hold:

- **it names the request**: the file's name carries the message id (``<id>.response`` as
  ``poli reply`` writes it; ``<id>.md`` or ``answer-<id>.txt`` by hand). A file whose name
  carries no known id answers the oldest request waiting for an answer from the pane the line
  comes from (the original protocol's files have free names);
- **once**: a file recorded as a request's response answers nothing else;
- **after**: the file was written after that request's delivery began, so a file that was
  there before the request reached the worker cannot be its answer.

Everything here is pure: the postman looks the facts up and applies the verdict.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing as t

from politerm.store.mail import MailState

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.messaging.protocol import ResponseLine
    from politerm.store.mail import Mail

MTIME_SLACK: t.Final = 0.05
"""Seconds a file's modification time may read earlier than the clock: file systems stamp
times from a coarse clock (a tick of up to 10 ms) while the store reads the fine one."""

_GENERATED_ID: t.Final = re.compile(r"m-[0-9a-f]{12}")


class Take(str, enum.Enum):
    """What becomes of one response line."""

    ANSWER = "answer"
    """It answers the request in the verdict."""
    KNOWN = "known"
    """The line of an answer already recorded (a notification, or a line seen before)."""
    REFUSED = "refused"
    """It answers nothing; the reason says why (recorded as a ``mail.rejected`` event)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The decision on one response line."""

    take: Take
    mail: Mail | None = None
    why: str = ""


def named_ids(file_name: str) -> list[str]:
    """The message ids a response file's name may carry, most specific first.

    The part before the first dot (``<id>.response``, for an id given with ``poli send
    --id``), then every generated id (``m-`` and 12 hex digits) anywhere in the name.

    Examples
    --------
    >>> named_ids("m-3f9c0a1b2c4d.response")
    ['m-3f9c0a1b2c4d']
    >>> named_ids("answer-m-3f9c0a1b2c4d.md")
    ['answer-m-3f9c0a1b2c4d', 'm-3f9c0a1b2c4d']
    >>> named_ids("answer.md")
    ['answer']
    """
    ids = [file_name.split(".", 1)[0]]
    ids += [m for m in _GENERATED_ID.findall(file_name) if m not in ids]
    return ids


def delivery_began(mail: Mail) -> float:
    """When ``mail``'s delivery began.

    Its ``delivered`` stamp, or the claim of the attempt under way (a DELIVERING message's
    last change).
    """
    if mail.delivered is not None:
        return mail.delivered
    return mail.updated


def judge(
    line: ResponseLine,
    *,
    file_name: str,
    written: float,
    waiting: Sequence[Mail],
    named: Mail | None,
    used_by: Mail | None,
) -> Verdict:
    """Decide which request ``line`` answers (see the module doc).

    Parameters
    ----------
    line
        The response line as read on the sender's screen.
    file_name
        The name of the file it points to (checked to be in the message directory).
    written
        The file's modification time (seconds since the epoch).
    waiting
        The requests of the line's sender that wait for an answer, oldest first.
    named
        The request whose id the file's name carries (:func:`named_ids`), if any.
    used_by
        The request already answered with this file, if any.

    Examples
    --------
    >>> from politerm.store.mail import Capability, Mail, MailKind
    >>> def mail(id, state, delivered):
    ...     return Mail(id, MailKind.REQUEST, "s", "ORCH", "%1", "W", "%2",
    ...                 Capability.WRITABLE, None, "b", 0, "", None, MailState(state), None,
    ...                 1, 3, 0.0, delivered, 999.0, delivered, delivered, None)
    >>> from politerm.messaging.protocol import ResponseLine
    >>> a, b = mail("m-a", "responded", 10.0), mail("m-b", "delivered", 20.0)
    >>> line = ResponseLine("%2", "/m/m-a.response")
    >>> judge(line, file_name="m-a.response", written=12.0, waiting=[b], named=a,
    ...       used_by=a).take.value
    'known'
    >>> v = judge(ResponseLine("%2", "/m/old.md"), file_name="old.md", written=15.0,
    ...           waiting=[b], named=None, used_by=None)
    >>> v.take.value, v.why
    ('refused', 'old.md was written before m-b was delivered: an older answer, not taken for it')
    >>> judge(ResponseLine("%2", "/m/new.md"), file_name="new.md", written=21.0,
    ...       waiting=[b], named=None, used_by=None).mail.id
    'm-b'
    """
    if used_by is not None:
        return Verdict(Take.KNOWN, used_by, f"{file_name} already answers {used_by.id}")
    if named is not None:
        if named.state not in (MailState.DELIVERING, MailState.DELIVERED):
            why = f"{file_name} names {named.id}, which is {named.state.value}, not waiting"
            return Verdict(Take.REFUSED, named, why)
        if all(m.id != named.id for m in waiting):
            why = f"{file_name} names {named.id}, which was not sent from this pane"
            return Verdict(Take.REFUSED, named, why)
        if written + MTIME_SLACK < delivery_began(named):
            why = f"{file_name} was written before {named.id} was delivered: not its answer"
            return Verdict(Take.REFUSED, named, why)
        return Verdict(Take.ANSWER, named)
    from_pane = [m for m in waiting if m.recipient_pane == line.pane]
    if not from_pane:
        return Verdict(Take.REFUSED, None, f"no request waits for an answer from {line.pane}")
    for mail in from_pane:
        if delivery_began(mail) <= written + MTIME_SLACK:
            return Verdict(Take.ANSWER, mail)
    oldest = from_pane[0]
    why = (
        f"{file_name} was written before {oldest.id} was delivered: an older answer, "
        "not taken for it"
    )
    return Verdict(Take.REFUSED, None, why)


__all__ = ["MTIME_SLACK", "Take", "Verdict", "delivery_began", "judge", "named_ids"]
