"""Many tasks across 3 nodes with seeded random faults (issue 22): 0 lost, 0 live twice.

Node a routes (PLANNER); nodes b and c are EXECUTER's pool. While the tasks run, the test
kills a node with ``kill -9`` (and starts it again), pauses one beyond its lease (SIGSTOP,
then SIGCONT) or restarts redis-server on its AOF, at seeded moments. Then every task must
be done or visibly failed, and the journals of b and c must show that no two attempts of
one piece of work were live at once: each attempt began after the one before it had lost
its lease, with a higher epoch, and only the newest could have its result accepted.
"""

from __future__ import annotations

import itertools
import json
import random
import typing as t

import pytest

from politerm.store.journal import JournalRow
from politerm.testing.retry import retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.loophelpers import EXECUTER_OK

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = 8
LEASE = 3.0
ENDED = frozenset({"done", "failed", "aborted"})
PLAN_HEAD = "You received a PLANNER plan block:"


def _states(a: FleetNode) -> dict[str, str]:
    shown = a.poli("status", "--json")
    assert shown.returncode == 0, shown.stderr
    return {task["id"]: task["state"] for task in json.loads(shown.stdout)["tasks"]}


def _handed(pool: t.Sequence[FleetNode]) -> int:
    """How many plan prompts the EXECUTERs of ``pool`` were handed (their own logs)."""
    return sum(p.startswith(PLAN_HEAD) for n in pool for p in n.prompts("EXECUTER"))


def _wait_for_a_plan(
    pool: t.Sequence[FleetNode], seen: int, a: FleetNode, ids: t.Sequence[str]
) -> FleetNode | None:
    """The node whose EXECUTER was handed a plan after the first ``seen``; None: all ended."""
    found: list[FleetNode | None] = []

    def moved() -> bool:
        if _handed(pool) > seen:
            newest = max(
                pool,
                key=lambda n: max(
                    (e["ts"] for e in n.events("EXECUTER") if e["event"] == "prompt"), default=0.0
                ),
            )
            found.append(newest)
            return True
        if all(_states(a).get(tid) in ENDED for tid in ids):
            found.append(None)
            return True
        return False

    retry_until(
        moved, 180, interval=0.2, what="an EXECUTER to be handed a plan, or every task to end"
    )
    return found[-1]


def _rows(node: FleetNode) -> list[JournalRow]:
    with node.store() as store:
        return store.journal_leased(500)


@pytest.mark.parametrize("seed", [2, 14])
def test_tasks_across_three_nodes_with_random_faults(
    redis_server: RedisServer, tmp_path: pathlib.Path, seed: int
) -> None:
    rng = random.Random(seed)
    executer = EXECUTER_OK.replace("think_time = 0.3", "think_time = 1.5")
    pool = ("b", "c")
    nodes = make_fleet(
        tmp_path, redis_server, ["a", *pool], executer_nodes=pool, executer=executer, lease=LEASE
    )
    a = nodes["a"]
    faults: list[str] = []
    try:
        for name in pool:
            nodes[name].start_node()
        assert a.poli("up").returncode == 0
        ids = [f"T-{i}" for i in range(TASKS)]
        for tid in ids:
            queued = a.poli("task", f"make hello {tid}", "--id", tid, "--no-wait")
            assert queued.returncode == 0, queued.stderr
        pool_nodes = [nodes[name] for name in pool]
        seen = 0
        while not all(_states(a).get(tid) in ENDED for tid in ids):
            # The next fault strikes right after an EXECUTER is handed a plan (mid-turn).
            fresh = _wait_for_a_plan(pool_nodes, seen, a, ids)
            if fresh is None:
                break  # every task ended meanwhile
            seen = _handed(pool_nodes)
            fault = rng.choice(("kill", "pause", "redis", "none"))
            print(f"fault {fault} on {fresh.name} after {seen} plans", flush=True)
            match fault:
                case "kill":
                    fresh.kill_node()
                    fresh.start_node()
                    faults.append(f"kill -9 {fresh.name}")
                case "pause":
                    fresh.pause_node()
                    # Cut off until its work went on elsewhere (or every task ended).
                    _wait_for_a_plan(pool_nodes, seen, a, ids)
                    seen = _handed(pool_nodes)
                    fresh.resume_node()
                    faults.append(f"pause {fresh.name}")
                case "redis":
                    redis_server.restart()
                    faults.append("redis restart")
                case _:
                    faults.append(f"none on {fresh.name}")
        # Every task ended, done or visibly failed (with its reason).
        shown = json.loads(a.poli("status", "--json").stdout)["tasks"]
        for task in shown:
            assert task["state"] in ("done", "failed"), task
            if task["state"] == "failed":
                assert task["error"], task
        assert sum(task["state"] == "done" for task in shown) >= 1, (shown, faults)
        # No two attempts of one work live at once, across both nodes' journals.
        rows = [r for name in pool for r in _rows(nodes[name])]
        by_work: dict[str, list[JournalRow]] = {}
        for row in rows:
            assert row.work is not None and row.epoch is not None
            by_work.setdefault(row.work, []).append(row)
        for work, attempts in by_work.items():
            attempts.sort(key=lambda r: t.cast("int", r.epoch))
            epochs = [r.epoch for r in attempts]
            assert len(set(epochs)) == len(epochs), (work, epochs)
            for before, after in itertools.pairwise(attempts):
                assert before.lease_until is not None
                assert after.started >= before.lease_until - 0.001, (work, before, after)
            accepted = [r for r in attempts if r.verdict == "accepted"]
            assert len(accepted) <= 1 and (not accepted or accepted[0] is attempts[-1]), attempts
        # What the agents themselves were handed: each plan prompt under one live attempt.
        assert _handed(pool_nodes) == len(rows), (_handed(pool_nodes), len(rows), faults)
    finally:
        tear_down(nodes)
