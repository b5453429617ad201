"""The fleet-wide budget breaker against a real redis-server: caps per project, agent, day."""

from __future__ import annotations

import math
import typing as t

import pytest

from politerm.errors import WorkInvalid
from politerm.fleet import WorkQueue, connect
from politerm.fleet.budget import Caps, FleetBudget
from politerm.protocol.usage import Usage

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer


def budget(server: RedisServer, caps: Caps) -> FleetBudget:
    """A node's view of the budget (each node has its own connection and its own config)."""
    return FleetBudget(WorkQueue(connect(server.url), "shop"), caps)


def test_an_agent_over_its_daily_tokens_stops_while_others_go_on(
    redis_server: RedisServer,
) -> None:
    node_a = budget(redis_server, Caps(agent_tokens_per_day=1000))
    node_b = budget(redis_server, Caps(agent_tokens_per_day=1000))
    assert node_a.admit("EXECUTER").ok
    assert node_a.charge("EXECUTER", Usage(600, 100)).ok
    # Another node sees the same numbers: its turn of the same agent pushes it over.
    assert node_b.admit("EXECUTER").ok
    after = node_b.charge("EXECUTER", Usage(250, 50))
    assert not after.ok
    verdict = node_a.admit("EXECUTER")
    assert not verdict.ok
    assert verdict.reason == (
        f"agent EXECUTER spent 1,000 tokens, its cap is 1,000 for {verdict.day} (UTC) "
        "([fleet.budget] agent_tokens_per_day): new turns wait for the next day, a higher "
        "cap or a reset"
    )
    assert node_b.admit("PLANNER").ok  # its own cap, untouched
    # A paused node's look counts nothing, and says what admit would.
    assert node_a.peek("EXECUTER").reason == verdict.reason
    assert node_a.peek("PLANNER").ok
    [project, executer, planner] = node_a.spending(["EXECUTER", "PLANNER"])
    assert (project.usage.total, project.turns, project.over) == (1000, 3, False)
    assert (executer.usage, executer.turns, executer.over) == (Usage(850, 150), 2, True)
    assert (planner.usage.total, planner.turns, planner.token_cap) == (0, 1, 1000)


def test_the_projects_cost_cap_stops_every_agent_and_a_higher_cap_resumes_them(
    redis_server: RedisServer,
) -> None:
    node_a = budget(redis_server, Caps(cost_per_day=2.5))
    node_b = budget(redis_server, Caps(cost_per_day=2.5))
    node_a.charge("PLANNER", Usage(10, 10), cost=1.25)
    assert node_b.admit("EXECUTER").ok
    node_b.charge("EXECUTER", Usage(10, 10), cost=1.25)
    for node, agent in ((node_a, "PLANNER"), (node_b, "EXECUTER")):
        verdict = node.admit(agent)
        assert not verdict.ok
        assert verdict.reason.startswith("the project spent 2.50 of cost, its cap is 2.50 for ")
        assert "([fleet.budget] cost_per_day)" in verdict.reason
    # Raised fleet-wide from any node: it wins over every node's configuration.
    node_b.set_cap("cost_per_day", 10.0)
    assert node_a.admit("PLANNER").ok
    [project] = node_a.spending()
    assert (project.cost, project.cost_cap, project.over) == (2.5, 10.0, False)
    node_a.set_cap("cost_per_day", None)  # no cap at all
    node_a.charge("PLANNER", Usage(), cost=100.0)
    assert node_b.admit("EXECUTER").ok
    node_a.clear_caps()  # the configuration's 2.5 applies again
    assert not node_b.admit("EXECUTER").ok


def test_a_reset_forgets_todays_spending_of_one_scope(redis_server: RedisServer) -> None:
    node = budget(redis_server, Caps(tokens_per_day=100, agent_tokens_per_day=50))
    node.charge("EXECUTER", Usage(60, 0))
    assert "agent EXECUTER spent 60 tokens" in node.admit("EXECUTER").reason
    node.reset("EXECUTER")
    assert node.admit("EXECUTER").ok
    node.charge("PLANNER", Usage(45, 0))
    assert "the project spent 105 tokens" in node.admit("PLANNER").reason
    node.reset()
    assert node.admit("PLANNER").ok


def test_one_agents_own_cap_wins_over_the_agents_cap(redis_server: RedisServer) -> None:
    node = budget(redis_server, Caps(agent_tokens_per_day=10))
    node.set_cap("agent_tokens_per_day", 1000, agent="EXECUTER")
    node.charge("EXECUTER", Usage(500, 0))
    node.charge("PLANNER", Usage(500, 0))
    assert node.admit("EXECUTER").ok
    assert not node.admit("PLANNER").ok
    [_, executer, planner] = node.spending(["EXECUTER", "PLANNER"])
    assert (executer.token_cap, planner.token_cap) == (1000, 10)


def test_the_days_counters_expire_on_their_own(redis_server: RedisServer) -> None:
    node = budget(redis_server, Caps())
    node.charge("EXECUTER", Usage(1, 1), cost=0.5)
    keys = list(node.queue.conn.cmd.scan_iter(match="*budget:*"))
    assert len(keys) == 2
    for key in keys:
        assert 2 * 86400 < node.queue.conn.cmd.ttl(key) <= 3 * 86400


class BadCase(t.NamedTuple):
    test_id: str
    call: t.Callable[[FleetBudget], object]
    message: str


BAD = [
    BadCase("unknown-cap", lambda b: b.set_cap("tokens", 1), "no budget cap 'tokens'"),
    BadCase(
        "project-cap-for-an-agent",
        lambda b: b.set_cap("tokens_per_day", 1, agent="X"),
        "tokens_per_day is the project's cap",
    ),
    BadCase("zero", lambda b: b.set_cap("cost_per_day", 0), "a cap must be > 0"),
    BadCase("nan", lambda b: b.set_cap("cost_per_day", math.nan), "a cap must be > 0"),
    BadCase("inf", lambda b: b.set_cap("tokens_per_day", math.inf), "a finite number"),
    BadCase("part-token", lambda b: b.set_cap("tokens_per_day", 2.5), "a whole number"),
    BadCase("negative", lambda b: b.charge("X", Usage(-1, 0)), "cannot be negative"),
    BadCase("agent-name", lambda b: b.admit("a b"), "agent 'a b'"),
]


@pytest.mark.parametrize("case", BAD, ids=[c.test_id for c in BAD])
def test_bad_requests_are_one_line_errors(redis_server: RedisServer, case: BadCase) -> None:
    with pytest.raises(WorkInvalid, match=case.message):
        case.call(budget(redis_server, Caps()))
