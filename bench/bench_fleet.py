"""The fleet's work queue: Redis commands per cycle, cycle latency, throughput of 3 nodes.

Against a private redis-server (AOF, ``appendfsync always``: every acknowledged write on
disk, as docs/fleet.md asks) and, in the same run, a baseline: the same cycle on one
machine in SQLite (WAL, ``synchronous = FULL``, as the run store: every commit on disk),
with the same rules (a claim bumps the epoch; a complete is accepted only from the
current epoch).

commands per cycle
    One cycle is what a node does for one piece of work: submit, claim, check (before
    typing), complete. ``INFO commandstats`` before and after N cycles: the client's round
    trips (EVALSHA, XREADGROUP) and every command they ran inside Redis, per cycle.
cycle latency
    claim → check → complete, and submit alone, p50/p99, against the SQLite baseline.
re-claim
    Node a claims a work and dies (never renews); node b waits in a blocking claim. The
    delay from a's lease running out to b's new attempt starting, both by Redis's clock.
router takeover
    A router holds the fleet's router role and is killed (never renews); a standby waits as
    ``poli up`` on another machine does (``RouterSeat.take``). The delay from the role's
    lease running out to the standby holding it, by Redis's clock.
three nodes
    300 works claimed and completed by 3 node threads (one connection each), works per
    second, against 3 threads on the SQLite baseline.
tasks across 3 machines
    The loop itself: 300 tasks over six Planner⇄Executer pairs (tests/fleet/chaos.py, on
    loopback, no faults), their agents' turns claimed by the ``poli node`` processes of
    three machines and typed into fake agents there, against the same pairs with every
    agent on one machine (driven by its router), in the same run; tasks per second, and
    the Redis commands per turn that went through the queue (``INFO commandstats``, less
    the idle fleet's heartbeats and blocking claims at the rate counted over 5 s before).

Run ``python -m bench.bench_fleet [--quick]`` or, with every benchmark,
``python -m bench.run``.
"""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import tempfile
import threading
import time
import typing as t

from tests.fleet.chaos import make_pairs
from tests.fleet.netns import FleetNet
from tests.fleet.redisserver import RedisServer
from tests.loophelpers import EXECUTER_OK, PLANNER_OK

from bench._common import Row, Stats, check, cli, print_table, ratio
from politerm.engine.fleetlink import RouterSeat
from politerm.fleet import Work, WorkQueue, connect
from politerm.fleet.routers import RouterLease, RouterRole
from politerm.store import RunStore
from politerm.testing.retry import retry_until

AGENT = "EXECUTER"


class SqliteQueue:
    """The baseline: the queue's cycle on one machine, in one SQLite file."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        conn = self._connect()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS works (id TEXT PRIMARY KEY, agent TEXT, kind TEXT,"
            " payload TEXT, state TEXT, epoch INTEGER, node TEXT, expires REAL, outcome TEXT)"
        )
        conn.close()
        self.local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = self._connect()
        return conn

    def submit(self, work_id: str) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO works VALUES (?, ?, 'turn', '{}', 'queued', 0, '', 0, '')",
            (work_id, AGENT),
        )

    def claim(self, node: str, lease: float) -> tuple[str, int] | None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "UPDATE works SET state = 'leased', epoch = epoch + 1, node = ?, expires = ?"
                " WHERE id = (SELECT id FROM works WHERE agent = ? AND (state = 'queued'"
                " OR (state = 'leased' AND expires < ?)) ORDER BY rowid LIMIT 1)"
                " RETURNING id, epoch",
                (node, time.time() + lease, AGENT, time.time()),
            ).fetchone()
        finally:
            conn.execute("COMMIT")
        return None if row is None else (row[0], row[1])

    def check(self, work_id: str, epoch: int, lease: float) -> bool:
        cur = self.conn.execute(
            "UPDATE works SET expires = ? WHERE id = ? AND epoch = ? AND state = 'leased'",
            (time.time() + lease, work_id, epoch),
        )
        return cur.rowcount == 1

    def complete(self, work_id: str, epoch: int) -> bool:
        cur = self.conn.execute(
            "UPDATE works SET state = 'done', outcome = '{}' WHERE id = ? AND epoch = ?"
            " AND state = 'leased'",
            (work_id, epoch),
        )
        return cur.rowcount == 1


def _commandstats(queue: WorkQueue) -> dict[str, int]:
    stats = queue.conn.cmd.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _cycle(queue: WorkQueue, work_id: str) -> tuple[float, float]:
    """One cycle on the queue: (submit ms, claim → check → complete ms)."""
    start = time.perf_counter()
    queue.submit(Work(work_id, AGENT, payload={"prompt": "p"}))
    submitted = time.perf_counter()
    lease = queue.claim("a", [AGENT])
    check(lease is not None and lease.work.id == work_id, f"claim did not hand out {work_id}")
    assert lease is not None
    queue.complete(queue.check(lease), {"reply": "r"})
    done = time.perf_counter()
    return (submitted - start) * 1000, (done - submitted) * 1000


def _sqlite_cycle(base: SqliteQueue, work_id: str) -> tuple[float, float]:
    start = time.perf_counter()
    base.submit(work_id)
    submitted = time.perf_counter()
    got = base.claim("a", 30.0)
    check(got is not None and got[0] == work_id, f"the baseline lost {work_id}")
    assert got is not None
    check(base.check(got[0], got[1], 30.0), "the baseline's check failed")
    check(base.complete(*got), "the baseline's complete was refused")
    done = time.perf_counter()
    return (submitted - start) * 1000, (done - submitted) * 1000


def bench_commands(queue: WorkQueue, n: int) -> list[Row]:
    before = _commandstats(queue)
    for i in range(n):
        _cycle(queue, f"cmd-{i}")
    after = _commandstats(queue)
    # What the client sends; everything else ran inside the scripts.
    sent = ("evalsha", "eval", "script|load", "info")
    rows: list[Row] = []
    for name in sorted(after, key=lambda k: (k not in sent, k)):
        calls = after[name] - before.get(name, 0)
        if name == "info":
            calls -= 1  # the 'after' snapshot itself
        if calls > 0:
            where = "round trip" if name in sent else "inside a script"
            rows.append({"command": name, "where": where, "per cycle": calls / n})
    trips = sum(float(r["per cycle"]) for r in rows if r["where"] == "round trip")
    check(trips == 4, f"a cycle took {trips:g} round trips, not 4 (submit, claim, check, complete)")
    total = sum(float(r["per cycle"]) for r in rows)
    rows.append({"command": "all", "where": "round trips", "per cycle": trips})
    rows.append({"command": "all", "where": "executed", "per cycle": total})
    return rows


def bench_latency(queue: WorkQueue, base: SqliteQueue, n: int) -> list[Row]:
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for i in range(n):  # interleaved, so both see the same machine
        ours.append(_cycle(queue, f"lat-{i}"))
        theirs.append(_sqlite_cycle(base, f"lat-{i}"))
    rows: list[Row] = []
    for index, measure in ((1, "claim → check → complete"), (0, "submit")):
        s = Stats.of([x[index] for x in ours])
        b = Stats.of([x[index] for x in theirs])
        rows.append(
            {
                "measure": measure,
                "n": s.n,
                "redis p50 ms": s.p50,
                "redis p99 ms": s.p99,
                "sqlite p50 ms": b.p50,
                "sqlite p99 ms": b.p99,
                "redis/sqlite p50": ratio(s.p50, b.p50),
                "redis/sqlite p99": ratio(s.p99, b.p99),
            }
        )
    return rows


def bench_reclaim(server: RedisServer, n: int, lease: float = 0.5) -> list[Row]:
    queue_a = WorkQueue(connect(server.url), "reclaim", lease=lease, margin=0.1)
    queue_b = WorkQueue(connect(server.url), "reclaim", lease=lease, margin=0.1)
    delays = []
    for i in range(n):
        queue_a.submit(Work(f"r-{i}", AGENT))
        dead = queue_a.claim("a", [AGENT])
        check(dead is not None, "node a got no work")
        assert dead is not None
        taken = queue_b.claim("b", [AGENT], block_ms=round(lease * 4000))
        check(taken is not None and taken.work.id == dead.work.id, "node b did not re-claim")
        assert taken is not None
        started = taken.expires_at - lease  # b's attempt began a lease before it expires
        delays.append((started - dead.expires_at) * 1000)
        queue_b.complete(taken, {})
    s = Stats.of(delays)
    measure = f"lease {lease:g} s ran out → re-claimed"
    return [{"measure": measure, "n": s.n, "p50 ms": s.p50, "p99 ms": s.p99, "max ms": s.max}]


def bench_router_takeover(server: RedisServer, root: pathlib.Path, n: int) -> list[Row]:
    lease = 0.5
    queue = WorkQueue(connect(server.url), "takeover")
    delays = []
    with RunStore.open(root / "standby.sqlite3") as store:
        for i in range(n):
            dead = RouterRole(queue, f"a/s/{i}", lease, 1).take()
            check(isinstance(dead, RouterLease), "router a did not take the role")
            assert isinstance(dead, RouterLease)
            seat = RouterSeat(RouterRole(queue, f"b/s/{i}", lease, 2), store)
            check(asyncio.run(seat.take()), "the standby did not take the role")
            assert seat.lease is not None
            took = seat.lease.expires_at - lease  # its take began a lease before it expires
            delays.append((took - dead.expires_at) * 1000)
            seat.release()
    s = Stats.of(delays)
    measure = f"role lease {lease:g} s ran out → standby holds it"
    return [{"measure": measure, "n": s.n, "p50 ms": s.p50, "p99 ms": s.p99, "max ms": s.max}]


def _three_nodes(work: t.Callable[[str], int], total: int) -> float:
    """Run ``work(node)`` in 3 threads until ``total`` works are done; works per second."""
    counts: list[int] = []
    start = time.perf_counter()
    threads = [
        threading.Thread(target=lambda name=name: counts.append(work(name)))
        for name in ("a", "b", "c")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    elapsed = time.perf_counter() - start
    check(sum(counts) == total, f"3 nodes finished {sum(counts)} of {total} works")
    return total / elapsed


def bench_nodes(server: RedisServer, base: SqliteQueue, total: int) -> list[Row]:
    submitter = WorkQueue(connect(server.url), "tput", lease=30.0, margin=5.0)
    for i in range(total):
        submitter.submit(Work(f"t-{i}", AGENT))
        base.submit(f"t-{i}")

    def redis_node(name: str) -> int:
        queue = WorkQueue(connect(server.url), "tput", lease=30.0, margin=5.0)
        done = 0
        while (lease := queue.claim(name, [AGENT])) is not None:
            queue.complete(queue.check(lease), {})
            done += 1
        return done

    def sqlite_node(name: str) -> int:
        done = 0
        while (got := base.claim(name, 30.0)) is not None:
            check(base.check(got[0], got[1], 30.0), "the baseline's check failed")
            done += base.complete(*got)
        return done

    ours = _three_nodes(redis_node, total)
    theirs = _three_nodes(sqlite_node, total)
    return [
        {
            "measure": f"{total} works, 3 nodes",
            "redis works/s": ours,
            "sqlite works/s": theirs,
            "redis/sqlite": ratio(ours, theirs),
        }
    ]


#: Seconds the fleet of pairs is left idle to count what it sends to Redis with no work.
IDLE_WINDOW = 5.0


def _pairs_run(root: pathlib.Path, tasks: int, *, one_machine: bool) -> tuple[float, float]:
    """Tasks per second of six pairs, and Redis commands per turn through the queue."""
    server = RedisServer(root / "redis")
    server.start()
    try:
        fleet = make_pairs(
            root,
            server,
            FleetNet("loopback"),
            pairs=6,
            tasks=tasks,
            window=3,
            lease=3.0,
            planner=PLANNER_OK,
            executer=EXECUTER_OK,
            one_machine=one_machine,
        )
        try:
            conn = connect(server.url)

            def commands() -> int:
                return sum(int(v["calls"]) for v in conn.cmd.info("commandstats").values())

            quiet = commands()
            time.sleep(IDLE_WINDOW)  # no task yet: what the idle fleet sends per second
            before = commands()
            idle_rate = (before - quiet - 1) / IDLE_WINDOW
            start = time.perf_counter()
            retry_until(fleet.feed, 1800, interval=0.1, what=f"{tasks} tasks to end")
            elapsed = time.perf_counter() - start
            busy = commands() - before - 1 - idle_rate * elapsed
            states = [t.state.value for p in fleet.pairs for t in p.store.list_tasks()]
            check(states.count("done") == tasks, f"not every task done: {states}")
            # Through the queue: every turn of a pooled agent (plan, result, final report).
            queued = sum(
                len(p.store.list_tasks()) * (3 if len(p.pooled) == 2 else 1)
                for p in fleet.pairs
                if p.pooled
            )
        finally:
            fleet.close()
    finally:
        server.stop()
    return tasks / elapsed, busy / queued if queued else 0.0


def bench_pairs(root: pathlib.Path, tasks: int) -> list[Row]:
    spread, per_turn = _pairs_run(root / "spread", tasks, one_machine=False)
    alone, _ = _pairs_run(root / "alone", tasks, one_machine=True)
    return [
        {
            "measure": f"{tasks} tasks, 6 pairs",
            "3 machines tasks/s": spread,
            "one machine tasks/s": alone,
            "3/one": ratio(spread, alone),
            "redis cmds per queued turn": per_turn,
        }
    ]


def main(quick: bool = False) -> list[Row]:
    n = 50 if quick else 400
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        server = RedisServer(root / "redis")
        server.start()
        try:
            queue = WorkQueue(connect(server.url), "bench", lease=30.0, margin=5.0)
            base = SqliteQueue(root / "baseline.sqlite3")
            _cycle(queue, "warm-up")  # scripts loaded, group created
            rows = print_table("fleet: Redis commands per cycle", bench_commands(queue, n))
            rows += print_table("fleet: cycle latency", bench_latency(queue, base, n))
            rows += print_table("fleet: re-claim", bench_reclaim(server, 3 if quick else 10))
            takeover = bench_router_takeover(server, root, 3 if quick else 10)
            rows += print_table("fleet: router takeover", takeover)
            tput = bench_nodes(server, base, 60 if quick else 300)
            rows += print_table("fleet: three nodes", tput)
        finally:
            server.stop()
        pairs = bench_pairs(root, 30 if quick else 300)
        rows += print_table("fleet: tasks across 3 machines", pairs)
    return rows


if __name__ == "__main__":
    cli(main)
