"""``poli node``: this machine's fleet node (claims work for the agents it hosts)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import signal

import click

from politerm.cli._common import config_option, load, open_store, project_option
from politerm.engine import service
from politerm.errors import FleetError


@click.command("node")
@click.option("--foreground", is_flag=True, help="Run the node in this process (until Ctrl-C).")
@click.option("--stop", is_flag=True, help="Stop this machine's node service.")
@click.option("--as-service", is_flag=True, hidden=True, help="Run as the project's service.")
@config_option
@project_option
def command(
    foreground: bool, stop: bool, as_service: bool, config_path: pathlib.Path | None
) -> None:
    """Start this machine's node of the project's fleet, as a supervised service.

    The node claims work from the fleet's Redis for the agents whose ``node`` (or
    ``nodes``) names it in poli.toml, starts them in its own tmux session, and types each
    prompt through the driver under the work's lease. ``poli status`` shows it; ``poli
    down`` (or ``poli node --stop``) stops it.
    """
    config = load(config_path)
    if config.fleet is None:
        msg = "poli node needs a [fleet] table in poli.toml (url, node): see docs/fleet.md"
        raise FleetError(msg)
    if stop:
        info = service.stop(config, service.NODE)
        click.echo(f"node: stopped (pid {info.pid})" if info else "node: none was running")
        return
    if not (foreground or as_service):
        info = service.start(config, config_path, service.NODE)
        click.echo(f"node {config.fleet.node}: service pid {info.pid} (log: "
                   f"{service.log_path(config, service.NODE)})")  # fmt: skip
        return
    from politerm.engine.fleetlink import open_queue
    from politerm.engine.node import Node
    from politerm.fleet.board import Board
    from politerm.fleet.budget import Caps, FleetBudget
    from politerm.fleet.nodes import NodeQueue
    from politerm.messaging.nodeletters import NodeLetters

    fleet = config.fleet
    with open_store(config) as store:
        queue = open_queue(config, store)
        claims = NodeQueue(queue, fleet.node, fleet.heartbeat)
        budget = FleetBudget(queue, Caps.from_config(fleet.budget))
        node = Node(config, store, claims, budget, NodeLetters(config, store), Board(queue))
        if not node.agents:
            click.echo(f"node {node.name}: no agent names this node (agents.X.node / nodes)")

        async def main() -> None:
            # SIGTERM (poli down, the supervisor) stops like Ctrl-C: the turns under way end.
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, node.stop)
            loop.add_signal_handler(signal.SIGINT, node.stop)
            click.echo(f"node {node.name}: hosting {', '.join(node.agents) or 'nothing'}")
            await node.run()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
