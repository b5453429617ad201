"""An agent's open usage limit in the run store, and the clocks it stops.

While an agent waits for a usage or rate limit to reset (LIMITED), work queued for it must
not run out of time: its limit is kept in the store (meta key ``limit:NAME``: since when,
until when, whether the screen named the reset) from the moment the driver reads it until
the limit is over. Meanwhile

- the router's messages to the agent (``messages.deadline``, their time to live) and the
  agent-to-agent mail to it (``mail.expires``: queued, or delivered and not yet answered)
  do not expire: the expiry queries skip a recipient with an open limit;
- at the end of the limit, each of those clocks is moved on by the time it stood still
  (from the start of the limit, or from the message's creation when it came later).

Because the limit lives in the store, a router or postman that restarts in the middle of a
limit keeps its start (the pause is not lost), ``poli status`` shows the reset time, and a
limit that ended while no process watched is closed at the next look.
"""

from __future__ import annotations

import dataclasses
import json
import typing as t

from politerm.store.mailstates import MailState
from politerm.store.turns import MessageState

if t.TYPE_CHECKING:
    from politerm.store.runstore import RunStore

PREFIX: t.Final = "limit:"

PAUSED_SQL: t.Final = (
    "EXISTS (SELECT 1 FROM meta WHERE meta.key = 'limit:' || {col} AND meta.value != '')"
)
"""SQL that is true while the agent named in column ``{col}`` has an open limit."""


@dataclasses.dataclass(frozen=True)
class StoredLimit:
    """An agent's open limit.

    Attributes
    ----------
    agent
        The agent's name.
    since
        When the limit was first read (epoch seconds).
    until
        When it resets: the time its screen named, else the policy's wait.
    shown
        Whether the screen named the reset time.
    """

    agent: str
    since: float
    until: float
    shown: bool

    def to_json(self) -> str:
        """The meta value (round-trips through :func:`decode`)."""
        return json.dumps({"since": self.since, "until": self.until, "shown": self.shown})


def decode(agent: str, value: str | None) -> StoredLimit | None:
    """The limit a meta value holds; None for none (or a value this version cannot read).

    Examples
    --------
    >>> decode("A", StoredLimit("A", 1.0, 61.0, True).to_json())
    StoredLimit(agent='A', since=1.0, until=61.0, shown=True)
    >>> decode("A", "") is None, decode("A", "garbage") is None
    (True, True)
    """
    if not value:
        return None
    try:
        data = json.loads(value)
        return StoredLimit(agent, float(data["since"]), float(data["until"]), bool(data["shown"]))
    except (ValueError, KeyError, TypeError):
        return None


def stored_limit(store: RunStore, agent: str) -> StoredLimit | None:
    """``agent``'s open limit, if it has one."""
    return decode(agent, store.get_meta(PREFIX + agent))


def open_limits(store: RunStore) -> dict[str, StoredLimit]:
    """Every agent's open limit, by agent name."""
    found = (decode(key[len(PREFIX) :], value) for key, value in store.meta_values(PREFIX).items())
    return {limit.agent: limit for limit in found if limit is not None}


def begin_limit(
    store: RunStore, agent: str, *, since: float, until: float, shown: bool
) -> StoredLimit:
    """Record that ``agent`` is limited until ``until``; return the limit as stored.

    A limit already open keeps its start (the clocks stopped then), and takes the new
    reset time.
    """
    with store.batch():
        old = stored_limit(store, agent)
        limit = StoredLimit(agent, old.since if old else since, until, shown)
        store.set_meta(PREFIX + agent, limit.to_json())
    return limit


def end_limit(store: RunStore, agent: str, now: float) -> float:
    """Close ``agent``'s open limit at ``now``: move its stopped clocks on, forget the limit.

    Returns the seconds the limit lasted (0.0 when none was open).
    """
    # The clocks a limit stops: messages still waiting for the agent, mail not answered.
    messages = (MessageState.QUEUED.value, MessageState.RETRIED.value)
    mail = (MailState.QUEUED.value, MailState.DELIVERING.value, MailState.DELIVERED.value)
    with store.batch():
        limit = stored_limit(store, agent)
        if limit is None:
            return 0.0
        with store._writing() as c:
            c.execute(
                "UPDATE messages SET deadline = deadline + MAX(0, ? - MAX(?, created))"
                f" WHERE recipient = ? AND deadline IS NOT NULL"
                f" AND state IN ({', '.join('?' * len(messages))})",
                (now, limit.since, agent, *messages),
            )
            c.execute(
                "UPDATE mail SET expires = expires + MAX(0, ? - MAX(?, created))"
                f" WHERE recipient = ? AND state IN ({', '.join('?' * len(mail))})",
                (now, limit.since, agent, *mail),
            )
        store.set_meta(PREFIX + agent, "")
    return max(0.0, now - limit.since)


__all__ = [
    "PAUSED_SQL",
    "PREFIX",
    "StoredLimit",
    "begin_limit",
    "decode",
    "end_limit",
    "open_limits",
    "stored_limit",
]
