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

Each layout runs twice: the fake agents keeping transcripts with each reply's usage (as the
real CLIs do: a turn's end reads its usage there) and keeping none (a profile whose
transcript is not there: nothing to wait for). Across two nodes, ``INFO commandstats``
before and after the timed tasks gives the Redis commands per task, each task one turn on
node b (two cross-node handoffs: posted, claimed, checked, renewed, completed, its reply
waited for), less what the fleet runs when idle (heartbeats, blocking claims: counted over
a quiet window before the tasks, at the same rate per second).

Run ``python -m bench.bench_fleetloop [--quick]``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import pathlib
import tempfile
import time

from tests.fleet.nodes import make_fleet, tear_down
from tests.fleet.redisserver import RedisServer

from bench._common import Row, Stats, check, cli, one_vs_two_nodes, print_table
from bench.bench_loop import Handoffs
from politerm.agents.profile import load_profile
from politerm.fleet import connect

#: Seconds the fleet is left idle to count what it sends to Redis with no work.
IDLE_WINDOW = 5.0


#: How many commands the breakdown of one layout's commands per task names.
TOP_COMMANDS = 12

Counts = collections.Counter[str]


def _commands(server: RedisServer) -> Counts:
    """Every command Redis ran so far, by name (``INFO commandstats``), scripts' insides
    included."""
    conn = connect(server.url)
    try:
        stats = conn.cmd.info("commandstats")
    finally:
        conn.close()
    return collections.Counter(
        {name.removeprefix("cmdstat_").upper(): int(v["calls"]) for name, v in stats.items()}
    )


@dataclasses.dataclass(frozen=True)
class Load:
    """What one layout cost Redis: per task (idle rate subtracted), and per second idle."""

    per_task: float
    idle_rate: float
    task_by_command: dict[str, float]
    idle_by_command: dict[str, float]


def _run(
    root: pathlib.Path, server: RedisServer, executer_on: str, n: int, *, transcripts: bool
) -> tuple[Handoffs, Load]:
    """The handoffs of ``n`` tasks, and what they and the idle fleet cost Redis."""
    names = ["a"] if executer_on == "a" else ["a", executer_on]
    nodes = make_fleet(
        root, server, names, executer_nodes=(executer_on,), lease=10, transcripts=transcripts
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
        quiet = _commands(server)
        time.sleep(IDLE_WINDOW)  # the fleet left alone: its idle rate of commands
        before = _commands(server)
        idle = before - quiet - collections.Counter({"INFO": 1})  # less the first INFO
        start = time.monotonic()
        for i in range(n):
            done = a.poli("task", f"handoff {i}", "--id", f"T-{i}", "--timeout", "60")
            check(done.returncode == 0, f"task T-{i}: {done.stdout}{done.stderr}")
        busy = _commands(server) - before - collections.Counter({"INFO": 1})
        took = time.monotonic() - start
        idle_by = {c: k / IDLE_WINDOW for c, k in idle.items()}
        task_by = {c: (busy[c] - idle_by.get(c, 0.0) * took) / n for c in busy | idle}
        load = Load(
            per_task=sum(task_by.values()),
            idle_rate=sum(idle_by.values()),
            task_by_command=task_by,
            idle_by_command=idle_by,
        )
        return Handoffs.read(a.root, nodes[executer_on].root), load
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
        runs: dict[bool, tuple[Handoffs, Handoffs, Load]] = {}
        try:
            for transcripts in (True, False):
                kept = "kept" if transcripts else "none"
                one, _ = _run(root / f"one-{kept}", server, "a", n, transcripts=transcripts)
                two, load = _run(root / f"two-{kept}", server, "b", n, transcripts=transcripts)
                runs[transcripts] = (one, two, load)
        finally:
            server.stop()
    rows: list[Row] = []
    for transcripts, (_, _, load) in runs.items():
        _print_breakdown("kept" if transcripts else "none", load)
    for (transcripts, (one, two, load)), (what, pick, delay) in itertools.product(
        runs.items(),
        (
            ("P→E (plan)", Handoffs.plan_ms, executer_delay),
            ("E→P (result)", Handoffs.result_ms, planner_delay),
        ),
    ):
        local, remote = Stats.of(pick(one, ids, delay)), Stats.of(pick(two, ids, delay))
        check(local.n == n and remote.n == n, f"{what}: {local.n}/{remote.n} of {n} paired")
        rows.append(
            {
                "handoff": what,
                "transcripts": "kept" if transcripts else "none",
                "n": n,
                **one_vs_two_nodes(local, remote),
                "redis cmds/task": load.per_task,
                "idle cmds/s": load.idle_rate,
            }
        )
    return print_table("fleet: the loop's handoff across nodes vs on one node", rows)


def _print_breakdown(kept: str, load: Load) -> None:
    """The two-node layout's commands per task and per idle second, by command."""

    def top(by: dict[str, float]) -> str:
        named = sorted(by.items(), key=lambda kv: -kv[1])[:TOP_COMMANDS]
        return ", ".join(f"{c} {k:.1f}" for c, k in named if round(k, 1) != 0)

    print(f"two nodes, transcripts {kept}: {load.per_task:.1f} commands per task: "
          f"{top(load.task_by_command)}")  # fmt: skip
    print(f"two nodes, transcripts {kept}: {load.idle_rate:.1f} commands per idle second: "
          f"{top(load.idle_by_command)}")  # fmt: skip


if __name__ == "__main__":
    cli(main)
