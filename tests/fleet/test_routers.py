"""The router role of a fleet project against a real redis-server: one router, fenced."""

from __future__ import annotations

import typing as t

import pytest

from politerm.errors import Fenced
from politerm.fleet import Work, WorkQueue, connect
from politerm.fleet.routers import RouterLease, RouterRole, RouterStatus
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer

LEASE = 0.5


def role(server: RedisServer, seat: str, pid: int) -> RouterRole:
    """A router's view of the role (its own connection, as on its own machine)."""
    return RouterRole(WorkQueue(connect(server.url, timeout=2.0), "shop"), seat, LEASE, pid)


def test_one_router_holds_the_role_a_standby_takes_it_when_it_runs_out_and_fences_the_first(
    redis_server: RedisServer,
) -> None:
    a = role(redis_server, "a/s/poli", 100)
    b = role(redis_server, "b/s/poli", 200)
    first = a.take()
    assert isinstance(first, RouterLease)
    assert first.holder == "a/s/poli#100"
    # A second router waits: it sees who holds the role, and is listed as a standby.
    held = b.take()
    assert isinstance(held, RouterStatus)
    assert held.holder == "a/s/poli#100" and held.token == first.token
    assert [name for name, _ago in a.status().standby] == ["b/s/poli#200"]
    # The holder's posts go through while it holds the role.
    queue = a.queue
    assert queue.submit(Work("w1", "EXECUTER"), router=first.token)
    # It stops renewing (killed): the standby takes the role after the lease, a new token.

    def taken() -> RouterLease | None:
        got = b.take()
        return got if isinstance(got, RouterLease) else None

    second = retry_until(taken, LEASE * 20, interval=LEASE / 10, what="the standby to take over")
    assert second.token > first.token
    assert a.status().holder == "b/s/poli#200" and a.status().standby == ()
    # The first router is fenced: its renewal and its posts are refused, nothing queued.
    with pytest.raises(Fenced, match="router b/s/poli#200 holds it"):
        a.renew(first)
    with pytest.raises(Fenced, match=f"router token {first.token} is fenced"):
        queue.submit(Work("w2", "EXECUTER"), router=first.token)
    assert queue.get("w2") is None
    assert queue.submit(Work("w2", "EXECUTER"), router=second.token)
    # A clean stop gives the role up at once.
    b.release(b.renew(second))
    assert a.status().holder is None


def test_a_router_restarted_in_the_same_seat_takes_the_role_at_once_with_a_new_token(
    redis_server: RedisServer,
) -> None:
    before = role(redis_server, "a/s/poli", 100).take()
    assert isinstance(before, RouterLease)
    # Killed and started again on its machine (the local lock proves the old one gone).
    after = role(redis_server, "a/s/poli", 101).take()
    assert isinstance(after, RouterLease)
    assert after.token > before.token
    with pytest.raises(Fenced):
        role(redis_server, "a/s/poli", 100).renew(before)
    # A router elsewhere still waits.
    assert isinstance(role(redis_server, "b/s/poli", 300).take(), RouterStatus)
