"""Which agents run where in a fleet: hosted by this node, driven by this router, or elsewhere.

``[agents.X] node = "b"`` pins an agent to a node, ``nodes = ["b", "c"]`` gives it a pool;
an agent with neither runs where the router runs, as without a fleet. The router of node N
drives an agent itself when it has no placement or is pinned to N; every other agent's
turns are fleet work (:mod:`politerm.engine.remote`), claimed by a node that hosts it
(:mod:`politerm.engine.node`).
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.config import Config


def hosted_here(config: Config, node: str) -> list[str]:
    """The agents node ``node`` may run: those whose ``node`` or ``nodes`` names it."""
    return [name for name, a in config.agents.items() if node in (a.hosts() or ())]


def driven_elsewhere(config: Config, node: str) -> list[str]:
    """The agents a router on node ``node`` does not drive itself: their turns are work.

    An agent with no placement, or placed on this node alone, is driven by the router
    here, as without a fleet; any other (another node, or a pool) goes through the queue.
    """
    return [name for name in config.agents if elsewhere(config, name, node)]


def elsewhere(config: Config, name: str, node: str | None = None) -> bool:
    """Whether agent ``name`` is reached through the fleet's queue from node ``node``.

    The one rule of :func:`driven_elsewhere`, for one agent: placed on another node or on
    a pool. ``node`` defaults to this machine's (``[fleet] node``; without ``[fleet]``
    every agent is here). A message to such an agent (:mod:`politerm.messaging`) and a
    bridge task for it are work for its node too.
    """
    if node is None:
        if config.fleet is None:
            return False
        node = config.fleet.node
    agent = config.agents.get(name)
    hosts = None if agent is None else agent.hosts()
    return hosts is not None and hosts != (node,)


def node_config(config: Config, agents: Sequence[str]) -> Config:
    """The configuration a node starts ``agents`` with: its own tmux session, no ``[fleet]``.

    The node's session holds exactly these agents, whatever their placement says.
    """
    tmux = config.tmux.model_copy(update={"session": f"{config.tmux.session}-node"})
    chosen = {name: config.agents[name] for name in agents}
    return config.model_copy(update={"tmux": tmux, "agents": chosen, "fleet": None})


def here_config(config: Config) -> tuple[Config, list[str]]:
    """The configuration of the agents this machine's router drives, and the others' names.

    Without ``[fleet]``: the configuration itself and no other agent.
    """
    if config.fleet is None:
        return config, []
    elsewhere = driven_elsewhere(config, config.fleet.node)
    here = {name: a for name, a in config.agents.items() if name not in elsewhere}
    return config.model_copy(update={"agents": here}), elsewhere


def placement(config: Config) -> dict[str, list[str] | None]:
    """Each agent's nodes (None: it runs where the router runs)."""
    out: dict[str, list[str] | None] = {}
    for name, agent in config.agents.items():
        hosts = agent.hosts()
        out[name] = None if hosts is None else list(hosts)
    return out
