"""The nodes of a fleet: heartbeats, what each hosts, and the queue as one node sees it.

A node beats every ``[fleet] heartbeat`` seconds (:meth:`Registry.heartbeat`): its record
holds Redis's time of the beat, the agents it hosts and its load. It counts as alive while
its last beat is younger than :data:`MISSED_BEATS` intervals, by Redis's clock.
:class:`NodeQueue` is the queue bound to one node's name: what ``poli node`` calls.
"""

from __future__ import annotations

import dataclasses
import json
import typing as t

from politerm.fleet import _scripts
from politerm.fleet.keys import GROUP, check_name

if t.TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from politerm.fleet.queue import WorkQueue
    from politerm.fleet.work import Lease

__all__ = ["MISSED_BEATS", "Backlog", "NodeQueue", "NodeStatus", "Registry"]

MISSED_BEATS: t.Final = 3
"""A node whose last heartbeat is older than this many intervals is shown as not alive."""


@dataclasses.dataclass(frozen=True)
class Backlog:
    """One agent's work stream: entries not yet handed to a node, and handed but unacked."""

    agent: str
    waiting: int
    pending: int


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    """A node as its last heartbeat left it."""

    name: str
    alive: bool
    seen_ago: float
    """Seconds since its last heartbeat (Redis's clock)."""
    agents: tuple[str, ...]
    load: Mapping[str, t.Any]
    lag: int
    """Entries waiting in the streams of the agents it hosts (not yet handed to any node)."""


class Registry:
    """The fleet's nodes, as their heartbeats tell (built by a :class:`WorkQueue`)."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self._beat = queue.conn.client.register_script(_scripts.HEARTBEAT)

    def heartbeat(
        self, node: str, agents: Sequence[str], load: Mapping[str, t.Any], every: float
    ) -> None:
        """Record that ``node`` is alive, hosts ``agents`` and is as busy as ``load`` says.

        ``every`` is its heartbeat interval in seconds: a record older than
        :data:`MISSED_BEATS` of them shows as not alive; one older than the queue's
        ``keep`` is forgotten.
        """
        check_name("node", node)
        keys = self.queue.keys
        with self.queue.conn.talking(f"sending node {node}'s heartbeat"):
            self._beat(
                keys=[keys.node(node), keys.nodes],
                args=[
                    node,
                    json.dumps(sorted(agents)),
                    json.dumps(dict(load), default=str),
                    round(every * 1000),
                    round(self.queue.keep * 1000),
                ],
            )

    def backlog(self, agents: Sequence[str] | None = None) -> list[Backlog]:
        """Each agent's stream: how much waits, how much is handed out (all agents if None)."""
        client = self.queue.conn.cmd
        keys = self.queue.keys
        with self.queue.conn.talking("reading the work streams"):
            names = sorted(agents if agents is not None else client.smembers(keys.agents))
            out = []
            for agent in names:
                if not client.exists(keys.stream(agent)):
                    out.append(Backlog(agent, 0, 0))
                    continue
                groups = client.xinfo_groups(keys.stream(agent))
                group: dict[str, t.Any] = next((g for g in groups if g.get("name") == GROUP), {})
                out.append(
                    Backlog(agent, int(group.get("lag") or 0), int(group.get("pending") or 0))
                )
        return out

    def nodes(self) -> list[NodeStatus]:
        """Every node that beat within the queue's ``keep``, by name."""
        client = self.queue.conn.cmd
        keys = self.queue.keys
        with self.queue.conn.talking("reading the nodes"):
            seconds, micros = client.time()
            now_ms = seconds * 1000 + micros // 1000
            names = sorted(client.smembers(keys.nodes))
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(keys.node(name))
            raws = pipe.execute()
        records = [raw for raw in raws if raw]
        hosted = {a for raw in records for a in _agents(raw)}
        lag = {b.agent: b.waiting for b in self.backlog(sorted(hosted))}
        out = []
        for raw in records:
            agents = _agents(raw)
            age_ms = max(0, now_ms - int(raw.get("beat") or 0))
            every = int(raw.get("every") or 1000)
            out.append(
                NodeStatus(
                    name=raw.get("name", ""),
                    alive=age_ms <= MISSED_BEATS * every,
                    seen_ago=age_ms / 1000,
                    agents=agents,
                    load=_load(raw),
                    lag=sum(lag.get(a, 0) for a in agents),
                )
            )
        return out


def _json(text: str | None) -> t.Any:
    try:
        return json.loads(text or "null")
    except ValueError:
        return None  # a record another program wrote: shown as empty, never a traceback


def _agents(raw: Mapping[str, str]) -> tuple[str, ...]:
    """The agents a heartbeat names (none when it names them oddly).

    Examples
    --------
    >>> _agents({"agents": '["A", "B"]'}), _agents({"agents": "junk"}), _agents({})
    (('A', 'B'), (), ())
    """
    value = _json(raw.get("agents"))
    return tuple(str(a) for a in value) if isinstance(value, list) else ()


def _load(raw: Mapping[str, str]) -> dict[str, t.Any]:
    value = _json(raw.get("load"))
    return value if isinstance(value, dict) else {}


class NodeQueue:
    """The queue as node ``name`` uses it: claims for its agents and its heartbeat.

    Parameters
    ----------
    queue
        The project's queue.
    name
        This node's name (``[fleet] node``).
    every
        Its heartbeat interval (``[fleet] heartbeat``), seconds.
    """

    def __init__(self, queue: WorkQueue, name: str, every: float = 5.0) -> None:
        self.queue = queue
        self.name = check_name("node", name)
        self.every = every
        self.registry = Registry(queue)

    def claim(self, agents: Sequence[str], *, block: float = 0.0) -> Lease | None:
        """A new attempt at the next work for one of ``agents``; waits at most ``block`` s."""
        return self.queue.claim(self.name, agents, block_ms=max(0, round(block * 1000)))

    def heartbeat(self, agents: Sequence[str], load: Mapping[str, t.Any]) -> None:
        """:meth:`Registry.heartbeat` for this node."""
        self.registry.heartbeat(self.name, agents, load, self.every)
