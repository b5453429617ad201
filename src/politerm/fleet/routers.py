"""The router role of a fleet project: one lease in Redis, fenced by a token, as work is.

A fleet project has one router: it posts the turns of remote agents and drives the agents
placed where it runs. Two routers would drive pinned agents twice, so the role is a lease
(``router``, a hash: holder, token, expiry), taken and renewed by one script each on
Redis's clock. Taking it after it expired (its router was killed, hung or cut off) draws a
new token from a counter; the router that held it before is then fenced: its renewals
fail, and a submit it makes with its old token is refused by the queue's own script
(:meth:`~politerm.fleet.queue.WorkQueue.submit` with ``router``), so nothing it posts
late reaches a node. A router that cannot take the role waits as a standby (listed in
``standby`` with Redis's time of its last try) and takes it when the lease runs out. A
router restarted where the holder ran (the same node and session: its *seat*) takes it at
once, with a new token: a local lock keeps one router per seat, so the holder is gone.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.errors import Fenced, WorkInvalid
from politerm.fleet import _scripts

if t.TYPE_CHECKING:
    from politerm.fleet.queue import WorkQueue

__all__ = ["RouterLease", "RouterRole", "RouterStatus", "router_status"]


@dataclasses.dataclass(frozen=True)
class RouterLease:
    """The router role, as its holder took or renewed it."""

    holder: str
    token: int
    """The fencing token: every take of the role after an expiry draws a higher one."""
    expires_at: float
    """Redis's clock, seconds since 1970."""
    deadline: float
    """This process's ``time.monotonic()`` by which the lease surely ended (counted from
    when the request was sent: never later than Redis's expiry)."""

    def remaining(self, now: float | None = None) -> float:
        """Seconds left by this process's clock."""
        return self.deadline - (time.monotonic() if now is None else now)


@dataclasses.dataclass(frozen=True)
class RouterStatus:
    """Who holds the router role and who waits for it (``poli fleet status``)."""

    holder: str | None
    token: int
    expires_in: float
    """Seconds until the holder's lease runs out unless renewed (Redis's clock)."""
    standby: tuple[tuple[str, float], ...]
    """Routers waiting for the role: (holder, seconds since its last try)."""


class RouterRole:
    """The router role of one fleet project (see the module docstring).

    Parameters
    ----------
    queue
        The project's queue (its connection and keys).
    seat
        Where the router runs: its node and session (one router at a time there, by a
        local lock). A router of the same seat takes the role over at once.
    lease
        Seconds a take or a renewal lasts.
    pid
        The router's process (the holder is ``SEAT#PID``).
    """

    def __init__(self, queue: WorkQueue, seat: str, lease: float, pid: int) -> None:
        if "#" in seat:
            msg = f"router seat {seat!r}: no '#' in a seat"
            raise WorkInvalid(msg)
        self.queue, self.seat, self.lease = queue, seat, lease
        self.holder = f"{seat}#{pid}"
        self._script = queue.conn.client.register_script(_scripts.ROUTER)

    def _call(self, mode: str, token: int, what: str) -> tuple[list[t.Any], float]:
        keys = self.queue.keys
        sent = time.monotonic()
        with self.queue.conn.talking(what):
            reply = self._script(
                keys=[keys.router, keys.router_epochs, keys.router_standby],
                args=[mode, self.holder, max(1, round(self.lease * 1000)), token, self.seat],
            )
        return list(reply), sent

    def _lease(self, reply: list[t.Any], sent: float) -> RouterLease:
        _, token, expires = reply
        return RouterLease(self.holder, int(token), int(expires) / 1000, sent + self.lease)

    def take(self) -> RouterLease | RouterStatus:
        """Take the role when it is free or expired; else who holds it (this one waits)."""
        reply, sent = self._call("take", 0, f"taking the router role as {self.holder}")
        if reply[0] == "ok":
            return self._lease(reply, sent)
        return self.status()

    def renew(self, lease: RouterLease) -> RouterLease:
        """Extend ``lease`` from now.

        Raises
        ------
        Fenced
            Another router took the role (a higher token), or it was released.
        """
        reply, sent = self._call("renew", lease.token, f"renewing the router role {lease.token}")
        if reply[0] != "ok":
            _, holder, token = reply
            now = f"router {holder} holds it (token {token})" if holder else "nobody holds it"
            msg = f"the router role of {self.holder} (token {lease.token}) is fenced: {now}"
            raise Fenced(msg)
        return self._lease(reply, sent)

    def release(self, lease: RouterLease) -> None:
        """Give the role up (a clean stop): a standby takes it at its next try."""
        self._call("release", lease.token, f"releasing the router role {lease.token}")

    def status(self) -> RouterStatus:
        """Who holds the role now, and the routers waiting for it."""
        return router_status(self.queue, self.lease)


def router_status(queue: WorkQueue, lease: float) -> RouterStatus:
    """Who holds the router role of ``queue``'s project, and who waits for it.

    ``lease``: the role's lease in seconds (a standby silent for three is forgotten).
    """
    keys = queue.keys
    client = queue.conn.cmd
    with queue.conn.talking("reading the router role"):
        seconds, micros = client.time()
        raw = client.hgetall(keys.router)
        standby = client.hgetall(keys.router_standby)
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    expires = int(raw.get("expires") or 0)
    live = expires > now_ms
    waiting = sorted(
        (name, max(0, now_ms - int(at)) / 1000)
        for name, at in standby.items()
        # A standby that stopped trying (killed, or it took the role) is left out.
        if now_ms - int(at) <= 3 * lease * 1000 and name != raw.get("holder")
    )
    return RouterStatus(
        holder=raw.get("holder") if live else None,
        token=int(raw.get("token") or 0),
        expires_in=max(0, expires - now_ms) / 1000,
        standby=tuple(waiting),
    )
