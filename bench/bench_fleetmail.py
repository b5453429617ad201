"""A message to an agent on another fleet node, against the same message on one node.

Both runs use the fleet's setup (a private redis-server, ``poli`` processes per node with
their own HOME, tmux server and store: tests/fleet/nodes.py) and the same fake agents:

one node
    EXECUTER on node a: a's postman types the message into its pane itself.
two nodes
    EXECUTER on node b: a's postman posts the message to the fleet's queue, b's ``poli
    node`` claims it, writes its copy of the request and types it under the lease.

``poli send --to EXECUTER`` on node a, one message after another (each once the receiver's
turn is over: its state DELIVERED on a, then the postman's settle), after one warm-up
message (node b starts its EXECUTER on its first work). Latency: the prompt in EXECUTER's
own log (``time.time()``, one machine) minus the message's ``created`` in a's store, less
the Executer's profile's submit delay.

Run ``python -m bench.bench_fleetmail [--quick]``.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
import time
import typing as t

from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.fleet.redisserver import RedisServer

from bench._common import Row, Stats, check, cli, one_vs_two_nodes, print_table
from politerm.agents.profile import load_profile
from politerm.testing.retry import retry_until

#: Seconds between messages: the local postman follows a receiver's turn until it has been
#: ready this long (its ``settle``), and only then types the next message.
MESSAGE_SETTLE = 1.5


def _send(a: FleetNode, host: FleetNode, text: str) -> float:
    """One message from a to EXECUTER on ``host``: ms from stored to typed."""
    sent = a.poli("send", "--to", "EXECUTER", text)
    check(sent.returncode == 0, f"poli send: {sent.stderr}")
    mail_id = sent.stdout.strip()

    def typed() -> float | None:
        for e in host.events("EXECUTER"):
            if e["event"] == "prompt" and f"Message {mail_id} " in e["text"]:
                return float(e["ts"])
        return None

    def delivered() -> dict[str, t.Any] | None:
        shown = a.poli("msg", "show", mail_id, "--json")
        found: dict[str, t.Any] = json.loads(shown.stdout)
        return found if found["state"] == "delivered" else None

    at = retry_until(typed, 90, what=f"EXECUTER to be handed {mail_id}")
    mail = retry_until(delivered, 90, what=f"{mail_id} delivered on a")
    time.sleep(MESSAGE_SETTLE)  # the local postman follows the turn this long after it
    return (at - float(mail["created"])) * 1000


def _run(root: pathlib.Path, server: RedisServer, executer_on: str, n: int) -> list[float]:
    names = ["a"] if executer_on == "a" else ["a", executer_on]
    nodes = make_fleet(root, server, names, executer_nodes=(executer_on,), lease=10)
    a = nodes["a"]
    # a's first `poli send` starts a's project service, whose postman delivers (or posts
    # to the fleet); tear_down's `poli down` stops it.
    try:
        if executer_on == "a":
            up = a.poli("up")
            check(up.returncode == 0, f"poli up: {up.stdout}{up.stderr}")
        else:
            nodes[executer_on].start_node()
        _send(a, nodes[executer_on], "warm up")  # not counted: b starts its EXECUTER
        return [_send(a, nodes[executer_on], f"ping {i}") for i in range(n)]
    finally:
        tear_down(nodes)


def main(quick: bool = False) -> list[Row]:
    n = 5 if quick else 30
    delay = load_profile("fake-codex").submit_delay * 1000
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        server = RedisServer(root / "redis")
        server.start()
        try:
            one = _run(root / "one", server, "a", n)
            two = _run(root / "two", server, "b", n)
        finally:
            server.stop()
    local = Stats.of([ms - delay for ms in one])
    remote = Stats.of([ms - delay for ms in two])
    check(local.n == n and remote.n == n, f"{local.n}/{remote.n} of {n} messages timed")
    rows: list[Row] = [{"path": "poli send → typed", "n": n, **one_vs_two_nodes(local, remote)}]
    return print_table("fleet: a message across nodes vs on one node", rows)


if __name__ == "__main__":
    cli(main)
