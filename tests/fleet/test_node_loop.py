"""The Planner⇄Executer loop across nodes: PLANNER on node a, EXECUTER on node b (issue 22).

Real redis-server, real ``poli`` processes per node (each its own HOME, tmux server and
store), the fake agents; what each agent was handed is read from its own log.
"""

from __future__ import annotations

import json
import os
import signal
import typing as t

import pytest

from politerm.config import load_config
from politerm.engine.fleetlink import open_queue
from politerm.fleet.budget import Caps, FleetBudget
from politerm.protocol.usage import Usage
from politerm.testing.retry import retry_until
from tests.fleet.chaos import Machine, Starver
from tests.fleet.nodes import (
    FleetNode,
    finished,
    make_fleet,
    slow_executer,
    start_task,
    tear_down,
)
from tests.loophelpers import EXECUTER_OK, PLANNER_OK

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.netns import FleetNet
    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow


def test_planner_on_a_executer_on_b_finishes_a_task(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"])
    a, b = nodes["a"], nodes["b"]
    try:
        b.start_node()
        up = a.poli("up")
        assert up.returncode == 0, up.stdout + up.stderr
        done = a.poli("task", "make hello", "--id", "T-1", "--timeout", "90")
        assert done.returncode == 0, done.stdout + done.stderr + b.log()
        assert "final report (T-1)" in done.stdout
        # The agents' own logs: the task reached PLANNER on a once, its plan EXECUTER on b
        # once, and EXECUTER's result came back to PLANNER.
        assert len([p for p in a.prompts("PLANNER") if p.startswith("TASK_ID=T-1")]) == 1
        assert len(b.plans()) == 1
        assert a.prompts("EXECUTER") == []
        assert any(p.startswith("EXECUTER replied:") for p in a.prompts("PLANNER"))
        # Node b typed the plan under a lease, recorded in its journal of turns, accepted.
        with b.store() as store:
            rows = store.journal_leased()
        assert len(rows) == 1, rows
        row = rows[0]
        assert (row.agent, row.node, row.state.value, row.verdict) == (
            "EXECUTER",
            "b",
            "ended",
            "accepted",
        )
        assert row.epoch is not None and row.epoch > 0
        assert row.lease_until is not None
        status = a.poli("status")
        assert "EXECUTER" in status.stdout
    finally:
        tear_down(nodes)


def _first_to_take(nodes: t.Iterable[FleetNode]) -> FleetNode:
    """The node whose EXECUTER was handed the plan first (read from the agents' logs)."""
    found: list[FleetNode] = []

    def handed() -> bool:
        found[:] = [n for n in nodes if n.plans()]
        return bool(found)

    retry_until(handed, 90, what="a node's EXECUTER to be handed the plan")
    return found[0]


def test_a_node_killed_mid_turn_its_work_finishes_on_another_node(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(
        tmp_path,
        redis_server,
        ["a", "b", "c"],
        executer_nodes=("b", "c"),
        executer=slow_executer(6),
    )
    a = nodes["a"]
    try:
        task = start_task(a, [nodes["b"], nodes["c"]], timeout=150)
        first = _first_to_take([nodes["b"], nodes["c"]])
        first.kill_node()  # mid-turn: its EXECUTER is thinking
        other = nodes["c"] if first is nodes["b"] else nodes["b"]
        finished(task, other, timeout=180)
        # Each EXECUTER was handed the plan once: attempt 1 on the dead node, 2 on the other.
        for node in (first, other):
            assert len(node.plans()) == 1
        with first.store() as store:
            (dead,) = store.journal_leased()
        with other.store() as store:
            (took,) = store.journal_leased()
        assert dead.work == took.work
        assert dead.verdict is None and took.verdict == "accepted"
        assert took.epoch is not None and dead.epoch is not None and took.epoch > dead.epoch
        # Never two attempts live at once: the second began after the first lease ran out.
        assert dead.lease_until is not None and took.started >= dead.lease_until
    finally:
        tear_down(nodes)


@pytest.mark.parametrize("how", ["pause", "cut"])
def test_a_node_cut_off_beyond_its_lease_comes_back_fenced_its_late_result_rejected(
    fleet_net: FleetNet, net_redis: RedisServer, tmp_path: pathlib.Path, how: str
) -> None:
    # pause: the node process stopped (SIGSTOP). cut: its machine's link down, a real
    # partition (on loopback, where no namespace could be made: SIGSTOP, and it says so).
    print(f"machines on {fleet_net.how}")
    slow = slow_executer(3)
    nodes = make_fleet(
        tmp_path,
        net_redis,
        ["a", "b", "c"],
        executer_nodes=("b", "c"),
        executer=slow,
        net=fleet_net,
    )
    a = nodes["a"]
    try:
        task = start_task(a, [nodes["b"], nodes["c"]], timeout=150)
        first = _first_to_take([nodes["b"], nodes["c"]])
        linked = how == "cut" and fleet_net.namespaced
        # Cut off mid-turn: its lease runs out.
        if linked:
            fleet_net.cut(first.name)
        else:
            first.pause_node()
        other = nodes["c"] if first is nodes["b"] else nodes["b"]
        out, _ = task.communicate(timeout=180)
        assert task.returncode == 0, out + other.log()
        # Back: its agent answered meanwhile; its result is late.
        if linked:
            fleet_net.heal(first.name)
        else:
            first.resume_node()

        def verdict() -> str | None:
            with first.store() as store:
                rows = store.journal_leased()
            return rows[0].verdict if rows and rows[0].verdict else None

        said = retry_until(verdict, 60, what="the fenced node to record its late result")
        assert said.startswith(("rejected", "fenced")), said
        with other.store() as store:
            (took,) = store.journal_leased()
        assert took.verdict == "accepted"
        # The plan was handed once to each EXECUTER: nothing typed again by the fenced node.
        for node in (first, other):
            assert len(node.plans()) == 1
    finally:
        tear_down(nodes)


def test_a_slow_node_keeps_its_work_while_it_renews_its_lease(
    fleet_net: FleetNet, net_redis: RedisServer, tmp_path: pathlib.Path
) -> None:
    # Node b's EXECUTER takes four leases to answer, and b is starved of CPU (its node and
    # agent stopped 0.3 s of every 0.8 s) while node c waits in the same pool, ready to
    # re-claim the work the moment b's lease lapsed. It never does: b renews.
    print(f"machines on {fleet_net.how}")
    lease = 3.0
    nodes = make_fleet(
        tmp_path,
        net_redis,
        ["a", "b", "c"],
        executer_nodes=("b", "c"),
        lease=lease,
        net=fleet_net,
        scenarios={"b": (PLANNER_OK, slow_executer(4 * lease))},
    )
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    try:
        task = start_task(a, [b], timeout=150)  # b alone at first: the plan goes to b
        _first_to_take([b])
        c.start_node()
        with Starver(Machine("b", [b])):
            out, _ = task.communicate(timeout=180)
        assert task.returncode == 0, out + b.log() + c.log()
        assert "final report (T-1)" in out
        # The agents' own logs: b's EXECUTER was handed the plan once, c's never.
        assert len(b.plans()) == 1
        assert c.prompts("EXECUTER") == []
        with b.store() as store:
            (row,) = store.journal_leased()
            fenced = [e for e in store.list_events() if e.kind in ("fenced", "late-result")]
        assert row.verdict == "accepted" and fenced == [], (row, fenced)
        # One attempt, its lease renewed all along: it ran out long after the first one would.
        assert row.epoch is not None and row.lease_until is not None
        assert row.lease_until > row.started + 3 * lease, row
    finally:
        tear_down(nodes)


def test_an_approval_given_on_node_a_reaches_the_executer_on_node_b(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    # EXECUTER asks to run a command before it answers; approval "ask": a person decides.
    executer = EXECUTER_OK.replace("write_file =", 'approval = "echo hi > ran.txt"\nwrite_file =')
    ask = '[routing]\napproval = "ask"\n'
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=executer, extra=ask)
    a, b = nodes["a"], nodes["b"]
    try:
        task = start_task(a, [b], timeout=120)

        def asking() -> dict[str, t.Any] | None:
            shown = a.poli("fleet", "status", "--json")
            assert shown.returncode == 0, shown.stderr
            found: dict[str, t.Any] | None = json.loads(shown.stdout)["approvals"].get("EXECUTER")
            return found

        # Node b's question shows on node a (from b's heartbeat), and a's answer reaches it.
        asks = retry_until(asking, 90, what="node b's EXECUTER to ask (fleet status on a)")
        assert asks["node"] == "b" and "echo hi > ran.txt" in asks["asks"]
        said = a.poli("approve", "EXECUTER")
        assert said.returncode == 0, said.stderr
        assert "on node b" in said.stdout
        out, _ = task.communicate(timeout=150)
        assert task.returncode == 0, out + b.log()
        answers = [e for e in b.events("EXECUTER") if e["event"] == "approval"]
        assert [e["approved"] for e in answers] == [True]
        text = a.poli("fleet", "status").stdout
        assert "b: alive" in text and "agent EXECUTER: b" in text
    finally:
        tear_down(nodes)


def test_the_fleet_budget_pauses_a_turn_before_anything_is_typed_and_a_raised_cap_resumes_it(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    caps = "[fleet.budget]\nagent_tokens_per_day = 5\n"
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], extra=caps)
    a, b = nodes["a"], nodes["b"]
    config = load_config(b.root, env={"POLI_FLEET_NODE": "b"})
    assert config.fleet is not None
    # EXECUTER already spent its day's tokens (on any node: the count is the fleet's).
    queue = open_queue(config)
    FleetBudget(queue, Caps.from_config(config.fleet.budget)).charge("EXECUTER", Usage(10, 0))
    over = "agent EXECUTER spent 10 tokens, its cap is 5"
    try:
        task = start_task(a, [b], timeout=150)

        # The router on a shows the task paused, with the breaker's words.
        a.shows_paused("T-1", over)
        budget = a.poli("fleet", "budget")
        assert "paused by the budget: loop-" in budget.stdout and over in budget.stdout
        assert over in a.poli("fleet", "status").stdout
        [work] = queue.ledger.paused()
        assert (work.agent, work.node) == ("EXECUTER", "b")
        # Nothing was typed into EXECUTER (its own log), and its attempt was undone.
        assert b.plans() == []
        record = queue.get(work.work_id)
        assert record is not None and record.attempt == 0
        assert task.poll() is None  # not failed: it waits

        raised = a.poli("fleet", "budget", "set", "agent_tokens_per_day", "1000000")
        assert raised.returncode == 0, raised.stderr
        assert "1 paused work(s) go on within seconds" in raised.stdout
        finished(task, b)
        # The same work went on, once: the plan handed to EXECUTER once, as attempt 1.
        assert len(b.plans()) == 1
        record = queue.get(work.work_id)
        assert record is not None and (record.state.value, record.attempt) == ("done", 1)
        assert queue.ledger.paused() == []
        assert a.paused("T-1") is None
        kinds = [e["kind"] for e in json.loads(a.poli("status", "--json").stdout)["events"]]
        assert "budget-resumed" in kinds
    finally:
        tear_down(nodes)


def test_redis_restarted_mid_turn_nothing_acknowledged_is_lost(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=slow_executer(3), lease=10)
    a, b = nodes["a"], nodes["b"]
    try:
        task = start_task(a, [b], timeout=120)
        _first_to_take([b])
        redis_server.restart()  # kill -9 and start again on its AOF, mid-turn
        finished(task, b)
        assert len(b.plans()) == 1
        with b.store() as store:
            (row,) = store.journal_leased()
        assert row.verdict == "accepted"
    finally:
        tear_down(nodes)


def test_the_router_killed_while_a_remote_turn_runs_posts_the_same_work_again(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=slow_executer(3))
    a, b = nodes["a"], nodes["b"]
    try:
        task = start_task(a, [b], timeout=120)
        _first_to_take([b])
        shown = json.loads(a.poli("status", "--json").stdout)["router"]
        os.kill(int(shown["router"]), signal.SIGKILL)  # its supervisor starts another
        finished(task, b)
        # The new router found the turn open, posted the same work (kept once) and took
        # its reply: the plan was handed to EXECUTER once, under one lease.
        assert len(b.plans()) == 1
        with b.store() as store:
            (row,) = store.journal_leased()
        assert row.verdict == "accepted"
        restarted = json.loads(a.poli("status", "--json").stdout)["router"]
        assert restarted["restarts"] >= 1
    finally:
        tear_down(nodes)
