"""``poli down``: stop every agent (whole process trees) and the session."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option, load, open_store
from politerm.engine.session import Session


@click.command("down")
@config_option
def command(config_path: pathlib.Path | None) -> None:
    """Kill the session and every agent process tree, verified gone."""
    config = load(config_path)
    with open_store(config) as store:

        async def main() -> list[str]:
            session = Session(config, store)
            try:
                return await session.down()
            finally:
                await session.server.close()

        stopped = asyncio.run(main())
    names = ", ".join(stopped) or "nothing was running"
    click.echo(f"down: {names}")
