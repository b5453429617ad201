"""The fleet's budget breaker on the turns a router types itself (issue 22).

The agents placed where the router runs are not claimed from the queue: the router types
their turns. The same caps stop them, with the same pause, display and resume as a
node's work. Real redis-server, real ``poli`` processes per node, the fake agents; what
each agent was handed is read from its own log.
"""

from __future__ import annotations

import asyncio
import json
import typing as t

import pytest

from politerm.config import load_config
from politerm.driver.tokens import add_tokens
from politerm.engine.fleetbudget import RouterBreaker
from politerm.engine.fleetlink import open_queue
from politerm.engine.fleetmeta import budget_paused
from politerm.fleet import Caps, FleetBudget, WorkQueue, connect
from politerm.protocol.usage import Usage
from politerm.store import RunStore
from politerm.testing.retry import aretry_until, retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

PLAN_HEAD = "You received a PLANNER plan block:"


class Case(t.NamedTuple):
    test_id: str
    executer_nodes: tuple[str, ...]
    capped: str
    """The agent over its cap: driven by the router on node a."""
    stopped: str
    """The start of the prompt the cap stops, in the capped agent's own log."""


CASES = [
    # PLANNER's first prompt, typed by the router's loop (EXECUTER's turns go to node b).
    Case("planner-on-the-routers-node", ("b",), "PLANNER", "TASK_ID=T-1"),
    # EXECUTER's plan, handed over in the commit of PLANNER's block (both driven on a).
    Case("executer-handoff-on-the-routers-node", ("a",), "EXECUTER", PLAN_HEAD),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_a_cap_stops_the_routers_own_agent_and_a_raised_cap_resumes_the_same_turn_once(
    redis_server: RedisServer, tmp_path: pathlib.Path, case: Case
) -> None:
    caps = "[fleet.budget]\nagent_tokens_per_day = 5\n"
    nodes = make_fleet(
        tmp_path, redis_server, sorted({"a", *case.executer_nodes}),
        executer_nodes=case.executer_nodes, extra=caps,
    )  # fmt: skip
    a = nodes["a"]
    config = load_config(a.root, env={"POLI_FLEET_NODE": "a"})
    assert config.fleet is not None
    queue = open_queue(config)
    # The capped agent already spent its day's tokens (anywhere: the count is the fleet's).
    budget = FleetBudget(queue, Caps.from_config(config.fleet.budget))
    budget.charge(case.capped, Usage(10, 0))
    over = f"agent {case.capped} spent 10 tokens, its cap is 5"

    def handed() -> list[str]:
        return [p for p in a.prompts(case.capped) if p.startswith(case.stopped)]

    try:
        for node in nodes.values():
            if node is not a:
                node.start_node()
        assert a.poli("up").returncode == 0
        task = a.start("task", "make hello", "--id", "T-1", "--timeout", "150")

        a.shows_paused("T-1", over)
        listed = f"paused by the budget: router-turn-T-1 ({case.capped}, on node a): {over}"
        assert listed in a.poli("fleet", "budget").stdout
        assert listed in a.poli("fleet", "status").stdout
        # The capped agent's own log: the prompt was not typed.
        assert handed() == []
        assert task.poll() is None  # not failed: it waits

        raised = a.poli("fleet", "budget", "set", "agent_tokens_per_day", "1000000")
        assert raised.returncode == 0, raised.stderr
        assert "1 paused work(s) go on within seconds" in raised.stdout
        out, _ = task.communicate(timeout=150)
        assert task.returncode == 0, out + _logs(nodes)
        assert "final report (T-1)" in out
        # The same prompt went on, once.
        assert len(handed()) == 1
        assert queue.ledger.paused() == []
        assert a.paused("T-1") is None
        kinds = [e["kind"] for e in json.loads(a.poli("status", "--json").stdout)["events"]]
        assert "budget-paused" in kinds and "budget-resumed" in kinds
    finally:
        tear_down(nodes)


def _logs(nodes: t.Mapping[str, FleetNode]) -> str:
    return "".join(n.log() for n in nodes.values())


async def test_the_router_breaker_charges_its_agents_spending_before_their_next_turn(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    budget = FleetBudget(
        WorkQueue(connect(redis_server.url), "shop"), Caps(agent_tokens_per_day=100)
    )
    woken: list[str] = []
    with RunStore.open(tmp_path / "store.db") as store:
        # Spent before the breaker first saw it: not the fleet's.
        add_tokens(store, ["agent:PLANNER"], Usage(500, 0))
        breaker = RouterBreaker(budget, store, "a", ["PLANNER"], woken.append)
        assert await breaker.admit("PLANNER", "T-1")
        add_tokens(store, ["agent:PLANNER"], Usage(80, 30))  # its turn spent 110
        # Charged first, so the turn it just had counts against its next one.
        assert not await breaker.admit("PLANNER", "T-1")
        spent = budget.spending(["PLANNER"])[1]
        assert (spent.usage.total, spent.turns, spent.over) == (110, 1, True)
        assert "agent PLANNER spent 110 tokens, its cap is 100" in budget_paused(store)["T-1"]
        [held] = budget.queue.ledger.paused()
        assert (held.work_id, held.agent, held.node) == ("router-turn-T-1", "PLANNER", "a")
        # Held back: asked again (another task's prompt), it stays so without a charge.
        assert not await breaker.admit("PLANNER", "T-2")
        assert set(budget_paused(store)) == {"T-1", "T-2"}

        budget.set_cap("agent_tokens_per_day", 1000, agent="PLANNER")
        looks = asyncio.create_task(breaker.run())
        try:
            await aretry_until(lambda: asyncio.sleep(0, woken), 10, what="PLANNER's loop woken")
        finally:
            looks.cancel()
        assert woken == ["PLANNER"]
        assert budget_paused(store) == {}
        assert budget.queue.ledger.paused() == []
        assert await breaker.admit("PLANNER", "T-1")
        assert budget.spending(["PLANNER"])[1].turns == 2


@pytest.mark.slow
def test_a_cap_holds_back_a_message_to_the_routers_own_agent_until_it_is_raised(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    caps = "[fleet.budget]\nagent_tokens_per_day = 5\n"
    nodes = make_fleet(tmp_path, redis_server, ["a"], executer_nodes=("a",), extra=caps)
    a = nodes["a"]
    config = load_config(a.root, env={"POLI_FLEET_NODE": "a"})
    assert config.fleet is not None
    queue = open_queue(config)
    FleetBudget(queue, Caps.from_config(config.fleet.budget)).charge("PLANNER", Usage(10, 0))
    over = "agent PLANNER spent 10 tokens, its cap is 5"
    body = "count the lines of ledger.txt"

    def handed() -> list[str]:
        return [p for p in a.prompts("PLANNER") if body in p]

    try:
        assert a.poli("up").returncode == 0
        sent = a.poli("send", "--to", "PLANNER", body)
        assert sent.returncode == 0, sent.stderr
        # Typed by the message lanes beside the router: the same breaker holds it back.
        listed = f"paused by the budget: router-turn-PLANNER (PLANNER, on node a): {over}"
        retry_until(lambda: listed in a.poli("fleet", "budget").stdout, 90, what="the held message")
        assert handed() == []

        raised = a.poli("fleet", "budget", "set", "agent_tokens_per_day", "1000000")
        assert raised.returncode == 0, raised.stderr
        retry_until(handed, 90, what="the message typed into PLANNER")
        assert len(handed()) == 1
        assert retry_until(lambda: queue.ledger.paused() == [], 30, what="the held line taken off")
    finally:
        tear_down(nodes)
