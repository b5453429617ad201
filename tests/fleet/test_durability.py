"""The queue through Redis faults: kill -9 and restart (AOF), a partition beyond the lease."""

from __future__ import annotations

import typing as t

import pytest

from politerm.errors import Fenced, FleetError, FleetUnavailable
from politerm.fleet import Work, WorkQueue, WorkState, connect
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer

T = t.TypeVar("T")
LEASE = 0.5


def make_queue(server: RedisServer, timeout: float = 2.0) -> WorkQueue:
    return WorkQueue(connect(server.url, timeout=timeout), "shop", lease=LEASE, margin=0.1)


def answered(call: t.Callable[[], T]) -> T:
    """``call()`` once Redis answers again (a restarted server drops the old sockets)."""

    def attempt() -> tuple[T] | None:
        try:
            return (call(),)
        except FleetUnavailable:
            return None

    return retry_until(attempt, 10, interval=0.05, what="Redis to answer again")[0]


def test_kill_9_and_restart_lose_nothing_acknowledged_and_redeliver_unacked_work(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server)
    for n in range(1, 5):
        queue.submit(Work(f"w{n}", "EXECUTER", payload={"n": n}))
    done = queue.claim("a", ["EXECUTER"])
    assert done is not None
    queue.complete(done, {"reply": "first"})
    held = queue.claim("a", ["EXECUTER"])
    assert held is not None
    assert (done.work.id, held.work.id) == ("w1", "w2")

    redis_server.kill()
    redis_server.restart()

    # The same queue object goes on once the server answers (its old sockets are dead).
    result = answered(lambda: queue.result("w1"))
    assert result is not None
    assert (result.state, result.outcome, result.epoch) == (
        WorkState.DONE,
        {"reply": "first"},
        done.epoch,
    )
    other = make_queue(redis_server)
    seen: dict[str, int] = {}
    while len(seen) < 3:
        lease = retry_until(
            lambda: other.claim("b", ["EXECUTER"]), LEASE * 20, what="the rest of the work"
        )
        assert lease.epoch > held.epoch  # the epoch counter survived: no token is reused
        seen[lease.work.id] = lease.work.attempt
        other.complete(lease, {"reply": lease.work.id})
    assert seen == {"w2": 2, "w3": 1, "w4": 1}  # w1 (acknowledged) never came back
    with pytest.raises(Fenced):
        queue.complete(held, {"reply": "from before the crash"})
    for n in range(1, 5):
        res = other.result(f"w{n}")
        assert res is not None
        assert res.state is WorkState.DONE


def test_a_node_cut_off_beyond_its_lease_may_not_type_and_is_fenced_when_it_comes_back(
    redis_server: RedisServer,
) -> None:
    node_a = make_queue(redis_server, timeout=0.3)
    node_b = make_queue(redis_server)
    node_a.submit(Work("w1", "EXECUTER"))
    lease = node_a.claim("a", ["EXECUTER"])
    assert lease is not None
    redis_server.pause()  # every client now waits: a partition, as Redis sees it
    try:
        with pytest.raises(FleetUnavailable, match=r"did not answer within 0\.3 s"):
            node_a.check(lease)  # it cannot prove it is live, so it must not type
        retry_until(lambda: lease.remaining() < 0, LEASE * 10, what="a's lease to run out")
    finally:
        redis_server.resume()
    taken = retry_until(
        lambda: node_b.claim("b", ["EXECUTER"]), LEASE * 20, what="b to re-claim the work"
    )
    assert (taken.work.attempt, taken.epoch > lease.epoch) == (2, True)
    # Node a is back (its process reconnects, with the usual timeout).
    node_a = make_queue(redis_server)
    with pytest.raises(Fenced, match="by node b"):
        node_a.check(lease)
    with pytest.raises(Fenced, match="recorded as late"):
        node_a.complete(lease, {"reply": "written while cut off"})
    node_b.complete(taken, {"reply": "b's"})
    result = node_a.wait_result("w1", timeout=5)
    assert result.outcome == {"reply": "b's"}
    assert [late.node for late in node_a.ledger.late_results()] == ["a"]


def test_after_redis_lost_its_data_nodes_go_on_and_other_errors_are_one_line(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server)
    queue.submit(Work("w1", "EXECUTER"))
    assert queue.claim("a", ["EXECUTER", "PLANNER"]) is not None
    queue.conn.cmd.flushall()  # a Redis without persistence, restarted: streams and groups gone
    assert queue.claim("a", ["EXECUTER", "PLANNER"]) is None
    assert queue.submit(Work("w2", "PLANNER"))
    lease = queue.claim("b", ["EXECUTER", "PLANNER"], block_ms=100)
    assert lease is not None
    assert lease.work.id == "w2"
    queue.conn.cmd.config_set("maxmemory", "1")  # now every write is refused
    try:
        with pytest.raises(FleetError, match=r"answered an error \(submitting work w3 for"):
            queue.submit(Work("w3", "PLANNER"))
    finally:
        queue.conn.cmd.config_set("maxmemory", "0")
