"""The states of a message between agents and the changes allowed between them.

Data, like the router's message states (:mod:`politerm.store.turns`): the mailbox
(:mod:`politerm.store.mail`) applies a change as a compare-and-set, and an agent's open
limit (:mod:`politerm.store.limits`) stops the clock of the states still waiting on it.
"""

from __future__ import annotations

import enum
import typing as t


class MailState(str, enum.Enum):
    """Where a message stands; see :data:`MAIL_TRANSITIONS`."""

    QUEUED = "queued"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    RESPONDED = "responded"
    EXPIRED = "expired"
    DEAD = "dead"

    @property
    def is_final(self) -> bool:
        """Whether nothing will happen to the message any more.

        Examples
        --------
        >>> MailState.DEAD.is_final, MailState.DELIVERED.is_final
        (True, False)
        """
        return self in FINAL_STATES


FINAL_STATES: t.Final = frozenset({MailState.RESPONDED, MailState.EXPIRED, MailState.DEAD})


MAIL_TRANSITIONS: t.Final[t.Mapping[MailState, frozenset[MailState]]] = {
    MailState.QUEUED: frozenset({MailState.DELIVERING, MailState.EXPIRED, MailState.DEAD}),
    # DELIVERING -> QUEUED: the receiver provably never got the text (not pasted, or pasted
    # and never submitted and cleared), so sending it again cannot run it twice.
    # DELIVERING -> RESPONDED: the router died after the paste and the worker answered
    # before a new router settled the delivery; the answer is the proof.
    MailState.DELIVERING: frozenset(
        {MailState.DELIVERED, MailState.QUEUED, MailState.RESPONDED, MailState.DEAD}
    ),
    MailState.DELIVERED: frozenset({MailState.RESPONDED, MailState.EXPIRED, MailState.DEAD}),
    MailState.RESPONDED: frozenset(),
    MailState.EXPIRED: frozenset(),
    MailState.DEAD: frozenset(),
}
"""Allowed state changes of a message; anything else is refused."""


def can_change(old: MailState, new: MailState) -> bool:
    """Whether a message may move from ``old`` to ``new``.

    Examples
    --------
    >>> can_change(MailState.QUEUED, MailState.DELIVERING)
    True
    >>> can_change(MailState.RESPONDED, MailState.QUEUED)
    False
    """
    return new in MAIL_TRANSITIONS[old]


__all__ = ["FINAL_STATES", "MAIL_TRANSITIONS", "MailState", "can_change"]
