"""``poli route``: run the router for the session (after a crash, or as a daemon)."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine.loop import route
from politerm.engine.router import ACTIVE


@click.command("route")
@click.option("--until-idle", is_flag=True, help="Exit when no task is in flight.")
@config_option
@project_option
def command(until_idle: bool, config_path: pathlib.Path | None) -> None:
    """Route messages between the running agents, resuming whatever is in flight."""
    config = load(config_path)
    with open_store(config) as store:

        def idle() -> bool:
            return not any(t.state in ACTIVE for t in store.list_tasks(active_only=True))

        asyncio.run(route(config, store, until=idle if until_idle else None, printer=print_event))
