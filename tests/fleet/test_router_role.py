"""One router per fleet project: the router role across real ``poli`` processes (issue 22).

PLANNER runs where the router runs (no placement), EXECUTER on node b. Routers are started
with ``poli up`` on nodes a and c: one holds the fleet's router role, the other waits as a
standby; what the agents were handed is read from their own logs.
"""

from __future__ import annotations

import json
import os
import signal
import typing as t

import pytest

from politerm.testing.retry import retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow


def _status(node: FleetNode) -> dict[str, t.Any]:
    shown = node.poli("status", "--json")
    assert shown.returncode == 0, shown.stderr
    data: dict[str, t.Any] = json.loads(shown.stdout)
    return data


def _role(node: FleetNode) -> str | None:
    """The role of ``node``'s router as its ``poli status`` shows it."""
    role = _status(node).get("fleet_router")
    return None if role is None else str(role["role"])


def _fleet_router(node: FleetNode) -> dict[str, t.Any]:
    shown = node.poli("fleet", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    router: dict[str, t.Any] = json.loads(shown.stdout)["router"]
    return router


def _two_routers(tmp: pathlib.Path, redis: RedisServer) -> dict[str, FleetNode]:
    """Nodes a, b, c: b's node hosts EXECUTER; a's router holds the role, c's waits."""
    nodes = make_fleet(tmp, redis, ["a", "b", "c"], planner_nodes=(), executer_nodes=("b",))
    nodes["b"].start_node()
    a, c = nodes["a"], nodes["c"]
    assert a.poli("up").returncode == 0
    retry_until(lambda: _role(a) == "active", 60, what="a's router to take the router role")
    assert c.poli("up").returncode == 0
    retry_until(lambda: _role(c) == "standby", 60, what="c's router to wait as a standby")
    return nodes


def test_a_second_router_waits_as_a_standby_and_takes_over_when_the_first_is_killed(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = _two_routers(tmp_path, redis_server)
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    try:
        # Both see who routes: a holds the role, c waits (fleet status, and c's status).
        router = _fleet_router(c)
        assert router["holder"].startswith("a/"), router
        # c's seat waits (each of its router processes that tried lately is listed).
        seats = {s["holder"].split("#")[0] for s in router["standby"]}
        assert seats == {f"c/{c.socket}/t"}, router
        shown = c.poli("status").stdout
        assert "fleet router role: standby" in shown, shown
        # kill -9 of a's router service: the supervisor held still first, so that it
        # neither restarts the router nor stops it cleanly (which would give the role up).
        shown = _status(a)["router"]
        os.kill(int(shown["pid"]), signal.SIGSTOP)
        os.kill(int(shown["router"]), signal.SIGKILL)
        os.kill(int(shown["pid"]), signal.SIGKILL)
        retry_until(lambda: _role(c) == "active", 60, what="c's router to take over the role")
        assert _fleet_router(a)["holder"].startswith("c/")
        done = c.poli("task", "make hello", "--id", "T-1", "--timeout", "90")
        assert done.returncode == 0, done.stdout + done.stderr + b.log()
        assert "final report (T-1)" in done.stdout
        assert len([p for p in c.prompts("PLANNER") if p.startswith("TASK_ID=T-1")]) == 1
        assert len(b.plans()) == 1
        assert a.prompts("PLANNER") == []
    finally:
        tear_down(nodes)


def test_a_router_cut_off_beyond_its_lease_is_fenced_and_types_nothing_more(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = _two_routers(tmp_path, redis_server)
    a, c = nodes["a"], nodes["c"]
    try:
        child = int(_status(a)["router"]["router"])
        os.kill(child, signal.SIGSTOP)  # a partition: it can neither renew nor type
        retry_until(lambda: _role(c) == "active", 60, what="c's router to take over the role")
        # Work for a's router while it is cut off: a task in its own store.
        a.poli("task", "make hello", "--id", "T-2", "--timeout", "1")
        os.kill(child, signal.SIGCONT)

        def fenced() -> bool:
            kinds = [e["kind"] for e in _status(a)["events"]]
            return "router-fenced" in kinds

        retry_until(fenced, 60, what="a's router to find itself fenced")
        # Its service starts the router again: it waits, as a standby, for c's role.
        retry_until(lambda: _role(a) == "standby", 60, what="a's router to wait as a standby")
        assert _fleet_router(c)["holder"].startswith("c/")
        # Nothing was typed for T-2, nor posted: PLANNER's log and the fleet's queue.
        assert [p for p in a.prompts("PLANNER") if "T-2" in p] == []
        assert nodes["b"].prompts("EXECUTER") == []
    finally:
        tear_down(nodes)
