"""``poli fleet``: the project's fleet of nodes (``poli fleet status``)."""

from __future__ import annotations

import json
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, project_option
from politerm.errors import FleetError


@click.group("fleet")
def command() -> None:
    """The project's fleet: nodes, leases and work across machines (docs/fleet.md)."""


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@config_option
@project_option
def status(as_json: bool, config_path: pathlib.Path | None) -> None:
    """Nodes (alive, lag, agents, load), leases, work in flight, dead letters, approvals."""
    config = load(config_path)
    if config.fleet is None:
        msg = "no [fleet] table in poli.toml: this project runs on one machine (docs/fleet.md)"
        raise FleetError(msg)
    from politerm.engine.fleetview import fleet_status, render_text

    with open_store(config) as store:
        data = fleet_status(config, store)
    click.echo(json.dumps(data, indent=2, default=str) if as_json else render_text(data))
