"""The agents' board: ``poli status --json`` of a fleet, and Redis's work per state change.

A private redis-server (tests/fleet/redisserver.py) holds the board of 3 nodes × N agents
(each node's rows published as its ``poli node`` does, one script call per change); the
project's ``poli status --json`` runs on a node that hosts none of them, as a process, the
way a user runs it. Against it: the same command in a project without ``[fleet]``.

Redis's work is counted by Redis itself (``INFO commandstats``): the commands one state
change costs its publisher, and each view or router that follows the board.

Run ``python -m bench.bench_fleetboard [--quick]``.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t

from tests.fleet.redisserver import RedisServer
from tests.loophelpers import write_project

from bench._common import Row, check, cli, print_table, ratio
from politerm.fleet import Board, WorkQueue, connect

if t.TYPE_CHECKING:
    from collections.abc import Callable


def _status_ms(root: pathlib.Path, env: dict[str, str], runs: int) -> tuple[float, int]:
    """The median wall time of ``poli status --json`` in ``root`` and how many agents it listed."""
    import json

    times, listed = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "politerm", "status", "--json"],
            cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        times.append((time.perf_counter() - start) * 1000)
        check(done.returncode == 0, f"poli status --json: {done.stderr}")
        listed = len(json.loads(done.stdout)["agents"])
    return statistics.median(times), listed


def _commands(board: Board, act: Callable[[], object]) -> dict[str, int]:
    """Redis's own count of each command ``act`` sent (``INFO commandstats``' difference)."""
    client = board.queue.conn.cmd

    def stats() -> dict[str, int]:
        raw = client.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()}

    before = stats()
    act()
    after = stats()
    counted = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    counted.pop("info", None)
    return counted


def main(quick: bool = False) -> list[Row]:
    sizes = (10, 50) if quick else (10, 100, 300)
    runs = 3 if quick else 7
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        server = RedisServer(root / "redis")
        server.start()
        try:
            env = {**os.environ, "HOME": str(root / "home"), "POLI_FLEET_NODE": "c"}
            plain = root / "plain"
            write_project(plain, "poli-bench-plain")
            alone_ms, _ = _status_ms(plain, env, runs)
            fleet = root / "fleet"
            extra = f'[fleet]\nurl = "{server.url}"\nproject = "bench"\nheartbeat = 60\n'
            write_project(fleet, "poli-bench-fleet", extra=extra)
            board = Board(WorkQueue(connect(server.url, timeout=5.0), "bench"))
            for n in sizes:
                for node in ("a", "b", "d"):
                    agents = {f"AGENT{i}": {"state": "ready", "profile": "fake"} for i in range(n)}
                    board.publish(node, agents, every=60)
                ms, listed = _status_ms(fleet, env, runs)
                check(listed >= 3 * n, f"{listed} agents listed of {3 * n}")
                read = statistics.median(_timed(board.rows) for _ in range(runs))
                rows.append(
                    {
                        "agents on the board": 3 * n,
                        "status --json ms (fleet)": ms,
                        "status --json ms (no fleet)": alone_ms,
                        "fleet/plain": ratio(ms, alone_ms),
                        "board read ms": read,
                    }
                )
            one = {"AGENT0": {"state": "busy", "profile": "fake", "turn": "T-1"}}
            publish = _commands(board, lambda: board.publish("a", one, every=60))
            after = board.last_change()
            board.publish("a", {"AGENT0": {"state": "ready", "profile": "fake"}}, every=60)

            def follow() -> None:
                _, fields = board.changes(after, 1.0)
                board.rows(fields)

            watch = _commands(board, follow)
        finally:
            server.stop()
    print_table("fleet: poli status --json over the agents' board (3 nodes)", rows)
    counts = [
        {"who": "the publisher (per state change)", **_words(publish)},
        {"who": "each follower (per change seen)", **_words(watch)},
    ]
    print_table("fleet: Redis commands per agent state change (INFO commandstats)", counts)
    return rows


def _words(counted: dict[str, int]) -> Row:
    return {
        # A pipeline of EXISTS (one per publisher seen) is one round trip.
        "round trips": sum(v for k, v in counted.items() if k in ("evalsha", "xread", "hmget"))
        + (1 if counted.get("exists") else 0),
        "commands (scripts' inside included)": sum(counted.values()),
        "by command": " ".join(f"{k}={v}" for k, v in sorted(counted.items())),
    }


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    cli(main)
