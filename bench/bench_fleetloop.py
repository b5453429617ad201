"""The Planner⇄Executer handoff across two fleet nodes, against the same loop on one node.

Both runs use the fleet's setup (a private redis-server, ``poli`` processes per node with
their own HOME, tmux server and store: tests/fleet/nodes.py) and the same fake agents:

one node
    PLANNER and EXECUTER both on node a: its router drives both itself.
two nodes
    PLANNER on node a, EXECUTER on node b: a's router posts EXECUTER's turns to the queue,
    b's ``poli node`` claims them, types them through the driver under the lease and sends
    the answering block back.

Latency from the fake agents' own logs (``time.time()``, one machine): P→E is the
Executer's ``prompt`` minus the Planner's ``reply`` that printed the plan block (less the
Executer's profile's submit delay); E→P the Planner's ``prompt`` minus the Executer's
``reply`` with the result block. Tasks run one after another, after one warm-up task
(node b starts its EXECUTER on its first work).

Redis commands per task: ``INFO commandstats`` before and after the counted tasks of the
two-node run, every client's (the router's posts and reply waits, the node's claims,
renewals, heartbeats and completes), per task; each task is one P→E and one E→P handoff.

Run ``python -m bench.bench_fleetloop [--quick]``.
"""

from __future__ import annotations

import pathlib
import tempfile

from tests.fleet.nodes import make_fleet, tear_down
from tests.fleet.redisserver import RedisServer

from bench._common import Row, Stats, check, cli, print_table, ratio
from bench.bench_loop import Handoffs
from politerm.agents.profile import load_profile
from politerm.fleet import connect


def _commands(server: RedisServer) -> dict[str, int]:
    stats = connect(server.url).cmd.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _run(
    root: pathlib.Path, server: RedisServer, executer_on: str, n: int
) -> tuple[Handoffs, dict[str, int]]:
    names = ["a"] if executer_on == "a" else ["a", executer_on]
    # With transcripts, as the real CLIs keep them: a turn's end waits for its usage there.
    nodes = make_fleet(
        root, server, names, executer_nodes=(executer_on,), lease=10, transcripts=True
    )
    a = nodes["a"]
    try:
        if executer_on != "a":
            nodes[executer_on].start_node()
        up = a.poli("up")
        check(up.returncode == 0, f"poli up: {up.stdout}{up.stderr}")
        # Not counted: node b starts its EXECUTER on its first work.
        warm = a.poli("task", "warm up", "--id", "W-0", "--timeout", "90")
        check(warm.returncode == 0, f"warm-up task: {warm.stdout}{warm.stderr}")
        before = _commands(server)
        for i in range(n):
            done = a.poli("task", f"handoff {i}", "--id", f"T-{i}", "--timeout", "60")
            check(done.returncode == 0, f"task T-{i}: {done.stdout}{done.stderr}")
        after = _commands(server)
        used = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        used["info"] = used.get("info", 0) - 1  # the 'after' snapshot itself
        return Handoffs.read(a.root, nodes[executer_on].root), used
    finally:
        tear_down(nodes)


def main(quick: bool = False) -> list[Row]:
    n = 5 if quick else 30
    ids = [f"T-{i}" for i in range(n)]
    executer_delay = load_profile("fake-codex").submit_delay
    planner_delay = load_profile("fake-claude").submit_delay
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        server = RedisServer(root / "redis")
        server.start()
        try:
            one, _ = _run(root / "one", server, "a", n)
            two, used = _run(root / "two", server, "b", n)
        finally:
            server.stop()
    rows: list[Row] = []
    for what, pick, delay in (
        ("P→E (plan)", Handoffs.plan_ms, executer_delay),
        ("E→P (result)", Handoffs.result_ms, planner_delay),
    ):
        local, remote = Stats.of(pick(one, ids, delay)), Stats.of(pick(two, ids, delay))
        check(local.n == n and remote.n == n, f"{what}: {local.n}/{remote.n} of {n} paired")
        rows.append(
            {
                "handoff": what,
                "n": n,
                "one node p50 ms": local.p50,
                "one node p99 ms": local.p99,
                "two nodes p50 ms": remote.p50,
                "two nodes p99 ms": remote.p99,
                "two/one p50": ratio(remote.p50, local.p50),
                "two/one p99": ratio(remote.p99, local.p99),
            }
        )
    rows = print_table("fleet: the loop's handoff across nodes vs on one node", rows)
    counts: list[Row] = [
        {"command": name, "per task": round(calls / n, 2)}
        for name, calls in sorted(used.items(), key=lambda kv: -kv[1])
        if calls > 0
    ]
    counts.append({"command": "all", "per task": round(sum(used.values()) / n, 2)})
    return rows + print_table("fleet: Redis commands per task across two nodes", counts)


if __name__ == "__main__":
    cli(main)
