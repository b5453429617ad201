"""``poli up``: start the session's agents, ready for tasks."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine import service
from politerm.engine.loop import follow_until_idle
from politerm.engine.placement import hosted_here
from politerm.engine.session import Session
from politerm.errors import ConfigError
from politerm.preflight import problems


@click.command("up")
@click.option("--resume", is_flag=True, help="Restart dead agents with their resume arguments.")
@click.option("--no-primers", is_flag=True, help="Do not send the primers.")
@click.option(
    "--no-route", is_flag=True, help="Do not start the router service (route with `poli route`)."
)
@config_option
@project_option
def command(
    resume: bool, no_primers: bool, no_route: bool, config_path: pathlib.Path | None
) -> None:
    """Create the tmux session with a PLANNER and an EXECUTER pane, each ready for work.

    Also starts the project's router service (one per project, restarted if it dies;
    ``poli status`` shows it, ``poli down`` stops it), which routes every task from then on.
    """
    config = load(config_path)
    found = problems(config)
    if found:  # before any agent starts
        for problem in found[:-1]:
            click.echo(f"poli: {problem}", err=True)
        raise ConfigError(found[-1])
    with open_store(config) as store:
        if resume:
            # Its router holds the old agents' panes: the resume settles them first.
            service.stop(config)

        async def main() -> None:
            session = Session(config, store)
            try:
                await session.up(resume=resume, primers=not no_primers, on_event=click.echo)
            finally:
                await session.host.close()
            if no_route:
                return
            if not resume:  # one that ran before the session came up delivers messages only
                service.stop(config)
            info = service.start(config, config_path)
            click.echo(f"router: service pid {info.pid} routes this project")
            if config.fleet is not None and hosted_here(config, config.fleet.node):
                node = service.start(config, config_path, service.NODE)
                click.echo(f"node {config.fleet.node}: service pid {node.pid} claims its work")
            if resume and store.list_tasks(active_only=True):
                await follow_until_idle(store, print_event)

        asyncio.run(main())
    click.echo(
        f"up: session {config.tmux.session!r} on socket {config.tmux.socket!r} (watch: poli attach)"
    )
