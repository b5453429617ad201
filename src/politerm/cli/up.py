"""``poli up``: start the session's agents, ready for tasks."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine.loop import route
from politerm.engine.router import ACTIVE
from politerm.engine.session import Session
from politerm.errors import ConfigError
from politerm.preflight import problems


@click.command("up")
@click.option("--resume", is_flag=True, help="Restart dead agents with their resume arguments.")
@click.option("--no-primers", is_flag=True, help="Do not send the primers.")
@click.option("--no-route", is_flag=True, help="With --resume: do not route resumed tasks now.")
@config_option
@project_option
def command(
    resume: bool, no_primers: bool, no_route: bool, config_path: pathlib.Path | None
) -> None:
    """Create the tmux session with a PLANNER and an EXECUTER pane, each ready for work."""
    config = load(config_path)
    found = problems(config)
    if found:  # before any agent starts
        for problem in found[:-1]:
            click.echo(f"poli: {problem}", err=True)
        raise ConfigError(found[-1])
    with open_store(config) as store:

        async def main() -> None:
            session = Session(config, store)
            try:
                await session.up(resume=resume, primers=not no_primers, on_event=click.echo)
            finally:
                await session.server.close()
            if resume and not no_route and store.list_tasks(active_only=True):

                def idle() -> bool:
                    return not any(t.state in ACTIVE for t in store.list_tasks(active_only=True))

                await route(config, store, until=idle, printer=print_event)

        asyncio.run(main())
    click.echo(
        f"up: session {config.tmux.session!r} on socket {config.tmux.socket!r} (watch: poli attach)"
    )
