"""What ``poli fleet status`` shows: the fleet's nodes, leases, work in flight, dead letters.

Read from the fleet's Redis (the nodes' heartbeats, the queue) and from this machine's
configuration (where each agent is placed) and store (the leases this machine typed
under). Pending approvals come with the heartbeats: a node names the questions its agents
wait on, and ``poli approve AGENT`` on any node answers them.
"""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.engine.fleetlink import open_queue
from politerm.engine.placement import placement
from politerm.fleet.nodes import Registry
from politerm.fleet.routers import router_status

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.store import RunStore


def fleet_status(config: Config, store: RunStore) -> dict[str, t.Any]:
    """The fleet as one JSON-ready mapping.

    Raises
    ------
    FleetError
        Redis could not be reached (the message says where, never the password).
    """
    assert config.fleet is not None
    queue = open_queue(config, store)
    registry = Registry(queue)
    nodes = registry.nodes()
    leases = queue.leases()
    role = router_status(queue, config.fleet.lease)
    approvals = {
        agent: {"node": n.name, "asks": what}
        for n in nodes
        if n.alive
        for agent, what in dict(n.load.get("approvals") or {}).items()
    }
    return {
        "project": config.fleet.project_name(config.project.root),
        "node": config.fleet.node,
        "url": queue.conn.where,
        "placement": placement(config),
        "router": {
            "holder": role.holder,
            "token": role.token,
            "expires_in": role.expires_in,
            "standby": [{"holder": h, "seen_ago": ago} for h, ago in role.standby],
        },
        "nodes": [dataclasses.asdict(n) for n in nodes],
        "backlog": [dataclasses.asdict(b) for b in registry.backlog()],
        "leases": [
            {**dataclasses.asdict(r), "kind": r.kind.value, "state": r.state.value} for r in leases
        ],
        "dead_letters": [
            {"work": d.work_id, "agent": d.agent, "attempts": d.attempt, **d.outcome}
            for d in queue.ledger.dead_letters(20)
        ],
        "late_results": [
            {
                "work": r.work_id,
                "agent": r.agent,
                "node": r.node,
                "epoch": r.epoch,
                "current_epoch": r.current_epoch,
            }
            for r in queue.ledger.late_results(20)
        ],
        "approvals": approvals,
        "paused": [p._asdict() for p in queue.ledger.paused()],
        "typed_here": [r.to_json() for r in store.journal_leased(20)],
    }


def render_text(data: t.Mapping[str, t.Any]) -> str:
    """``poli fleet status`` as lines of text."""
    lines = [f"fleet {data['project']} at {data['url']} (this node: {data['node']})"]
    for name, hosts in data["placement"].items():
        where = ", ".join(hosts) if hosts else "where the router runs"
        lines.append(f"  agent {name}: {where}")
    router = data["router"]
    if router["holder"]:
        lines.append(f"router: {router['holder']} (token {router['token']})")
    else:
        lines.append("router: none holds the role (`poli up` on one node takes it)")
    for s in router["standby"]:
        lines.append(f"  standby router: {s['holder']} (waits; seen {s['seen_ago']:.1f}s ago)")
    lines.append("nodes:")
    for n in data["nodes"] or []:
        state = "alive" if n["alive"] else "NOT SEEN"
        busy = ", ".join(n["load"].get("busy") or []) or "idle"
        lines.append(
            f"  {n['name']}: {state} ({n['seen_ago']:.1f}s ago), lag {n['lag']}, "
            f"hosts {', '.join(n['agents']) or '-'}; busy: {busy}"
        )
    if not data["nodes"]:
        lines.append("  none has sent a heartbeat (start one with `poli node`)")
    lines.append("leases:" if data["leases"] else "leases: none")
    for r in data["leases"]:
        lines.append(
            f"  {r['id']} ({r['agent']}, {r['kind']}): {r['state']} by node {r['node']}, "
            f"attempt {r['attempt']}, epoch {r['epoch']}"
        )
    waiting = [b for b in data["backlog"] if b["waiting"] or b["pending"]]
    if waiting:
        lines.append("in flight:")
        for b in waiting:
            lines.append(f"  {b['agent']}: {b['waiting']} waiting, {b['pending']} handed out")
    for d in data["dead_letters"]:
        lines.append(f"dead letter {d['work']} ({d['agent']}): {d.get('error') or '?'}")
    for r in data["late_results"]:
        lines.append(
            f"late result rejected: {r['work']} from node {r['node']} "
            f"(epoch {r['epoch']}, newest {r['current_epoch']})"
        )
    lines.extend(paused_lines(data["paused"]))
    for agent, ask in data["approvals"].items():
        lines.append(
            f"approval: {agent} on node {ask['node']} asks {ask['asks']} (`poli approve {agent}`)"
        )
    return "\n".join(lines)


def paused_lines(paused: t.Sequence[t.Mapping[str, t.Any]]) -> list[str]:
    """The work the fleet's budget paused, one line each (``poli fleet status``, ``budget``).

    Examples
    --------
    >>> paused_lines([{"work_id": "loop-3-ab", "agent": "X", "node": "b", "reason": "over"}])
    ['paused by the budget: loop-3-ab (X, on node b): over']
    """
    return [
        f"paused by the budget: {p['work_id']} ({p['agent']}, on node {p['node']}): {p['reason']}"
        for p in paused
    ]
