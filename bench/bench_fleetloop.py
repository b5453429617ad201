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

Then messages: ``poli send --to EXECUTER`` on node a, one after another, with a's postman
running; the latency is the Executer's ``prompt`` minus the message's ``created`` in a's
store (less the submit delay). On one node a's postman types it; across two it posts it to
the queue and b's ``poli node`` types it. Each message waits until its receiver's turn is
over (its state DELIVERED, then the postman's settle) before the next one is sent.

Run ``python -m bench.bench_fleetloop [--quick]``.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
import time
import typing as t

from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.fleet.redisserver import RedisServer

from bench._common import Row, Stats, check, cli, print_table, ratio
from bench.bench_loop import Handoffs
from politerm.agents.profile import load_profile
from politerm.testing.retry import retry_until

#: Seconds between messages: the local postman follows a receiver's turn until it has been
#: ready this long (its ``settle``), and only then types the next message.
MESSAGE_SETTLE = 1.5


def _messages(a: FleetNode, host: FleetNode, n: int) -> list[float]:
    """``n`` messages from a to EXECUTER on ``host``: ms from stored to typed, each."""
    out: list[float] = []
    for i in range(n):
        sent = a.poli("send", "--to", "EXECUTER", f"ping {i}")
        check(sent.returncode == 0, f"poli send: {sent.stderr}")
        mail_id = sent.stdout.strip()

        def typed(mail_id: str = mail_id) -> float | None:
            for e in host.events("EXECUTER"):
                if e["event"] == "prompt" and f"Message {mail_id} " in e["text"]:
                    return float(e["ts"])
            return None

        def delivered(mail_id: str = mail_id) -> dict[str, t.Any] | None:
            shown = a.poli("msg", "show", mail_id, "--json")
            found: dict[str, t.Any] = json.loads(shown.stdout)
            return found if found["state"] == "delivered" else None

        at = retry_until(typed, 60, what=f"EXECUTER to be handed {mail_id}")
        mail = retry_until(delivered, 60, what=f"{mail_id} delivered on a")
        out.append((at - float(mail["created"])) * 1000)
        time.sleep(MESSAGE_SETTLE)  # the local postman follows the turn this long after it
    return out


def _run(
    root: pathlib.Path, server: RedisServer, executer_on: str, n: int
) -> tuple[Handoffs, list[float]]:
    names = ["a"] if executer_on == "a" else ["a", executer_on]
    # With transcripts, as the real CLIs keep them: a turn's end waits for its usage there.
    nodes = make_fleet(
        root, server, names, executer_nodes=(executer_on,), lease=10, transcripts=True
    )
    a = nodes["a"]
    a.env["POLI_POSTMAN"] = "off"  # a's postman is this run's (stopped with it)
    postman = a.start("msg", "route", "--idle-exit", "300")
    try:
        if executer_on != "a":
            nodes[executer_on].start_node()
        up = a.poli("up")
        check(up.returncode == 0, f"poli up: {up.stdout}{up.stderr}")
        # Not counted: node b starts its EXECUTER on its first work.
        warm = a.poli("task", "warm up", "--id", "W-0", "--timeout", "90")
        check(warm.returncode == 0, f"warm-up task: {warm.stdout}{warm.stderr}")
        for i in range(n):
            done = a.poli("task", f"handoff {i}", "--id", f"T-{i}", "--timeout", "60")
            check(done.returncode == 0, f"task T-{i}: {done.stdout}{done.stderr}")
        handoffs = Handoffs.read(a.root, nodes[executer_on].root)
        return handoffs, _messages(a, nodes[executer_on], n)
    finally:
        postman.terminate()
        postman.communicate(timeout=30)
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
            one = _run(root / "one", server, "a", n)
            two = _run(root / "two", server, "b", n)
        finally:
            server.stop()
    rows: list[Row] = []
    for what, local_ms, remote_ms in (
        ("P→E (plan)", one[0].plan_ms(ids, executer_delay), two[0].plan_ms(ids, executer_delay)),
        (
            "E→P (result)",
            one[0].result_ms(ids, planner_delay),
            two[0].result_ms(ids, planner_delay),
        ),
        (
            "poli send → typed",
            [ms - executer_delay * 1000 for ms in one[1]],
            [ms - executer_delay * 1000 for ms in two[1]],
        ),
    ):
        local, remote = Stats.of(local_ms), Stats.of(remote_ms)
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
    return print_table("fleet: the loop's handoff and a message across nodes vs on one node", rows)


if __name__ == "__main__":
    cli(main)
