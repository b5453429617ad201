"""``poli fleet budget``: today's spending, caps set fleet-wide, a reset (a real Redis)."""

from __future__ import annotations

import json
import typing as t

from politerm.fleet import Caps, FleetBudget, WorkQueue, connect
from politerm.protocol.usage import Usage
from tests.test_cli import poli

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer


def test_the_budget_commands(tmp_path: pathlib.Path, redis_server: RedisServer) -> None:
    (tmp_path / "poli.toml").write_text(
        f'[fleet]\nurl = "{redis_server.url}"\nnode = "a"\nproject = "shop"\n'
        "[fleet.budget]\nagent_tokens_per_day = 100\n"
    )
    node = FleetBudget(WorkQueue(connect(redis_server.url), "shop"), Caps(agent_tokens_per_day=100))
    node.admit("EXECUTER")
    node.charge("EXECUTER", Usage(90, 20), cost=0.25)

    shown = poli(tmp_path, "fleet", "budget")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("fleet budget for ")
    assert "  project: 110 tokens (no cap), cost 0.25 (no cap), 1 turns" in lines
    assert (
        "  agent:EXECUTER: 110 tokens of 100, cost 0.25 (no cap), 1 turns: OVER, new turns wait"
        in lines
    )
    assert "  agent:PLANNER: 0 tokens of 100, cost 0.00 (no cap), 0 turns" in lines
    assert redis_server.password not in shown.stdout + shown.stderr

    raised = poli(tmp_path, "fleet", "budget", "set", "agent_tokens_per_day", "500")
    assert raised.returncode == 0, raised.stderr
    assert node.admit("EXECUTER").ok  # every node sees the raised cap
    data = json.loads(poli(tmp_path, "fleet", "budget", "--json").stdout)
    executer = next(r for r in data["scopes"] if r["scope"] == "agent:EXECUTER")
    assert data["paused"] == []
    assert (executer["token_cap"], executer["over"], executer["turns"]) == (500, False, 2)

    assert poli(tmp_path, "fleet", "budget", "clear").returncode == 0
    assert not node.admit("EXECUTER").ok
    reset = poli(tmp_path, "fleet", "budget", "reset", "--agent", "EXECUTER")
    assert reset.stdout.strip() == "today's spending of agent EXECUTER is reset"
    assert node.admit("EXECUTER").ok

    bad = poli(tmp_path, "fleet", "budget", "set", "cost_per_day", "lots")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "poli: cost_per_day: expected a number > 0 or 'none', got 'lots'"
    zero = poli(tmp_path, "fleet", "budget", "set", "cost_per_day", "0")
    assert zero.stderr.strip() == "poli: cost_per_day: a cap must be > 0 (or none), got 0"


def test_without_a_fleet_table_it_says_so(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text("")
    out = poli(tmp_path, "fleet", "budget")
    assert out.returncode == 1
    assert out.stderr.strip().startswith("poli: no [fleet] table in poli.toml")
