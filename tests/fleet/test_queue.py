"""The fleet's work queue against a real redis-server: submit, claim, leases, fencing."""

from __future__ import annotations

import collections
import threading
import typing as t

import pytest

from politerm.errors import Fenced, LeaseExpiring, ResultTimeout, WorkInvalid
from politerm.fleet import Work, WorkKind, WorkQueue, WorkState, connect
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from politerm.fleet import Lease
    from tests.fleet.redisserver import RedisServer

# Short leases keep the expiry tests quick; every wait on them is bounded (retry_until).
LEASE = 0.5


def make_queue(server: RedisServer, **options: t.Any) -> WorkQueue:
    """A queue of project 'shop' on ``server`` (fresh connection each call, as a node)."""
    options.setdefault("lease", LEASE)
    options.setdefault("margin", 0.1)
    return WorkQueue(connect(server.url, timeout=2.0), "shop", **options)


def claim_expired(queue: WorkQueue, node: str, agents: list[str]) -> Lease:
    """Claim as ``node`` until an expired lease comes back (bounded by a few leases)."""
    return retry_until(
        lambda: queue.claim(node, agents),
        LEASE * 20,
        interval=LEASE / 5,
        what=f"node {node} to re-claim expired work",
    )


def test_submitting_an_id_twice_keeps_one_work(redis_server: RedisServer) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0)
    work = Work("t1:turn:1", "EXECUTER", WorkKind.TURN, {"prompt": "build it"})
    assert queue.submit(work) is True
    assert queue.submit(work) is False
    assert queue.submit(Work("t1:turn:1", "EXECUTER", WorkKind.TURN, {"prompt": "x"})) is False
    with pytest.raises(WorkInvalid, match="already submitted for EXECUTER, not PLANNER"):
        queue.submit(Work("t1:turn:1", "PLANNER"))
    lease = queue.claim("a", ["EXECUTER"])
    assert lease is not None
    assert lease.work.payload == {"prompt": "build it"}
    assert queue.claim("b", ["EXECUTER"]) is None  # one entry, handed out once


def test_claim_renew_check_complete_and_the_submitter_reads_the_result(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0)
    queue.submit(Work("w1", "EXECUTER", WorkKind.MESSAGE, {"body": "hi"}))
    assert queue.claim("a", ["PLANNER"]) is None  # not an agent of this work
    lease = queue.claim("a", ["PLANNER", "EXECUTER"], block_ms=200)
    assert lease is not None
    assert (lease.work.id, lease.work.kind, lease.work.attempt) == ("w1", WorkKind.MESSAGE, 1)
    assert lease.epoch >= 1
    assert lease.remaining() > 25
    record = queue.get("w1")
    assert record is not None
    assert (record.state, record.node, record.epoch) == (WorkState.LEASED, "a", lease.epoch)
    assert [r.id for r in queue.leases()] == ["w1"]
    renewed = queue.renew(lease)
    assert renewed.epoch == lease.epoch
    assert renewed.expires_at >= lease.expires_at
    checked = queue.check(renewed)
    assert checked.epoch == lease.epoch
    with pytest.raises(LeaseExpiring, match="less than the 40 s margin"):
        queue.check(renewed, margin=40)
    assert queue.result("w1") is None
    queue.complete(checked, {"reply": "done it"})
    queue.complete(checked, {"reply": "done it"})  # the same report again: still accepted
    result = queue.wait_result("w1", timeout=5)
    assert (result.state, result.outcome, result.node) == (
        WorkState.DONE,
        {"reply": "done it"},
        "a",
    )
    assert result.epoch == lease.epoch
    assert queue.leases() == []
    assert queue.ledger.late_results() == []


def test_wait_result_is_bounded_and_says_where_the_work_stands(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0)
    queue.submit(Work("w1", "EXECUTER"))
    with pytest.raises(ResultTimeout, match=r"work w1 had no result within 0.3 s \(it is queued"):
        queue.wait_result("w1", timeout=0.3)
    assert queue.claim("b", ["EXECUTER"]) is not None
    with pytest.raises(ResultTimeout, match="leased by node b, attempt 1"):
        queue.wait_result("w1", timeout=0.2)
    with pytest.raises(WorkInvalid, match="no work 'nope'"):
        queue.wait_result("nope", timeout=0.2)


def test_a_result_completed_during_the_wait_wakes_the_waiter(redis_server: RedisServer) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0)
    queue.submit(Work("w1", "EXECUTER"))
    lease = queue.claim("a", ["EXECUTER"])
    assert lease is not None
    other = make_queue(redis_server, lease=30.0, margin=5.0)
    waiting = threading.Event()

    def complete_later() -> None:
        waiting.wait(5)
        other.complete(lease, {"ok": 1})

    thread = threading.Thread(target=complete_later)
    thread.start()
    waiting.set()
    result = queue.wait_result("w1", timeout=10)
    thread.join(5)
    assert result.outcome == {"ok": 1}


def test_an_expired_lease_is_reclaimed_with_a_higher_epoch_and_the_old_holder_is_fenced(
    redis_server: RedisServer,
) -> None:
    node_a = make_queue(redis_server)
    node_b = make_queue(redis_server)
    node_a.submit(Work("w1", "EXECUTER", WorkKind.TURN, {"prompt": "p"}))
    old = node_a.claim("a", ["EXECUTER"])
    assert old is not None
    # (That a live lease goes to nobody else: test_submitting_an_id_twice_keeps_one_work,
    # with a lease no load can outlast between two calls.)
    new = claim_expired(node_b, "b", ["EXECUTER"])
    assert (new.work.id, new.work.attempt, new.node) == ("w1", 2, "b")
    assert new.epoch > old.epoch
    assert old.remaining() <= 0  # a's own clock already said it was over
    with pytest.raises(Fenced, match=f"by node b \\(epoch {new.epoch}\\)"):
        node_a.renew(old)
    with pytest.raises(Fenced):
        node_a.check(old)
    with pytest.raises(Fenced, match="rejected and recorded as late"):
        node_a.complete(old, {"reply": "late words"})
    node_b.complete(new, {"reply": "fresh words"})
    result = node_a.wait_result("w1", timeout=5)
    assert (result.outcome, result.node, result.epoch) == ({"reply": "fresh words"}, "b", new.epoch)
    [late] = node_a.ledger.late_results()
    assert (late.work_id, late.epoch, late.node, late.current_epoch) == (
        "w1",
        old.epoch,
        "a",
        new.epoch,
    )
    assert late.outcome == {"reply": "late words"}
    record = node_a.get("w1")
    assert record is not None
    assert (record.state, record.attempt, record.late) == (WorkState.DONE, 2, 1)
    # A late report after the work is done is rejected the same way.
    with pytest.raises(Fenced, match="the work is done"):
        node_a.complete(old, {"reply": "later still"})


def test_an_expired_lease_that_nobody_reclaimed_can_still_be_renewed(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server)
    queue.submit(Work("w1", "EXECUTER"))
    lease = queue.claim("a", ["EXECUTER"])
    assert lease is not None
    retry_until(lambda: lease.remaining() < 0, LEASE * 4, what="the lease to run out")
    renewed = queue.renew(lease)  # no newer epoch exists: the attempt is still the newest
    assert renewed.epoch == lease.epoch
    assert renewed.expires_at > lease.expires_at  # by Redis's clock: extended from now
    queue.complete(renewed, {})
    assert queue.claim("b", ["EXECUTER"]) is None


def test_given_back_work_is_claimed_again_as_a_new_attempt_and_dies_after_max_attempts(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0, max_attempts=2)
    queue.submit(Work("w1", "EXECUTER"))
    first = queue.claim("a", ["EXECUTER"])
    assert first is not None
    queue.give_back(first, "the agent would not start")
    with pytest.raises(Fenced, match="the work is queued"):
        queue.renew(first)
    second = queue.claim("b", ["EXECUTER"])
    assert second is not None
    assert (second.work.attempt, second.node) == (2, "b")
    assert second.epoch > first.epoch
    queue.give_back(second, "again password=hunter2")
    assert queue.claim("c", ["EXECUTER"]) is None  # two attempts used up: a dead letter
    result = queue.wait_result("w1", timeout=5)
    assert result.state is WorkState.DEAD
    assert result.attempt == 2
    error = result.outcome["error"]
    assert error.startswith("used up its 2 attempts (last: again [REDACTED:password")
    [dead] = queue.ledger.dead_letters()
    assert (dead.work_id, dead.agent, dead.attempt) == ("w1", "EXECUTER", 2)
    assert queue.leases() == []


def test_work_values_are_checked_before_anything_is_sent(redis_server: RedisServer) -> None:
    queue = make_queue(redis_server)
    with pytest.raises(WorkInvalid, match="work id 'a b'"):
        Work("a b", "EXECUTER")
    with pytest.raises(WorkInvalid, match="agent 'no/slash'"):
        Work("w", "no/slash")
    with pytest.raises(WorkInvalid, match="kind 'poke' is not one of turn, message"):
        Work("w", "EXECUTER", t.cast("WorkKind", "poke"))
    with pytest.raises(WorkInvalid, match="is not JSON"):
        queue.submit(Work("w", "EXECUTER", WorkKind.TURN, {"x": {1, 2}}))
    with pytest.raises(WorkInvalid, match="looks like a secret"):
        queue.submit(Work("ghp_" + "a" * 36, "EXECUTER"))
    with pytest.raises(WorkInvalid, match="node 'x y'"):
        queue.claim("x y", ["EXECUTER"])
    assert queue.claim("a", []) is None


def test_a_node_hosting_two_agents_serves_both_in_turn(redis_server: RedisServer) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0)
    for n in range(3):
        queue.submit(Work(f"p{n}", "PLANNER"))
        queue.submit(Work(f"e{n}", "EXECUTER"))
    agents = []
    for _ in range(4):
        lease = queue.claim("a", ["PLANNER", "EXECUTER"])
        assert lease is not None
        agents.append(lease.work.agent)
    assert sorted(agents) == ["EXECUTER", "EXECUTER", "PLANNER", "PLANNER"]


def test_paused_work_keeps_its_attempt_wakes_its_waiter_and_is_claimed_again(
    redis_server: RedisServer,
) -> None:
    queue = make_queue(redis_server, lease=30.0, margin=5.0, max_attempts=1)
    queue.submit(Work("w1", "EXECUTER"))
    cursor = queue.results_end()
    first = queue.claim("a", ["EXECUTER"])
    assert first is not None
    queue.park(first, "agent EXECUTER spent 10 tokens, its cap is 5")
    with pytest.raises(Fenced, match="the work is paused"):
        queue.renew(first)
    record, result = queue.standing("w1")
    assert result is None
    assert (record.state, record.attempt) == (WorkState.PAUSED, 0)
    assert record.paused == "agent EXECUTER spent 10 tokens, its cap is 5"
    [paused] = queue.ledger.paused()
    assert (paused.work_id, paused.agent, paused.node) == ("w1", "EXECUTER", "a")
    # Its waiters are woken by the pause (they find it paused, not ended).
    _, found = queue.read_results(cursor, 1.0)
    assert [(f["id"], f["state"]) for f in found] == [("w1", "paused")]
    # The undone attempt did not count: with max_attempts 1 it is still claimed, as attempt 1.
    again = queue.claim("b", ["EXECUTER"])
    assert again is not None
    assert (again.work.attempt, again.node) == (1, "b")
    assert again.epoch > first.epoch
    assert queue.ledger.paused() == []
    assert queue.standing("w1")[0].paused == ""
    queue.complete(again, {"ok": True})
    assert queue.wait_result("w1", timeout=5).outcome == {"ok": True}


def _calls(queue: WorkQueue) -> collections.Counter[str]:
    """Every command Redis ran so far, by name (scripts' insides included)."""
    stats = queue.conn.cmd.info("commandstats")
    return collections.Counter(
        {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    )


def test_an_idle_claim_looks_once_then_blocks_once(redis_server: RedisServer) -> None:
    queue = make_queue(redis_server)
    agents = ["EXECUTER", "EXECUTER.answer"]
    assert queue.claim("a", agents) is None  # makes the streams and their group
    before = _calls(queue)
    assert queue.claim("a", agents, block_ms=300) is None
    spent = _calls(queue) - before - collections.Counter({"info": 1})
    # One script (each stream's pending entries and new ones, the next expiry), then one
    # blocked read of both streams. The node's next claim looks first: no look again at
    # the end of this one.
    assert spent == collections.Counter(
        {"evalsha": 1, "time": 1, "xpending": 2, "xreadgroup": 3, "zrange": 1}
    )
