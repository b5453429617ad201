"""``poli notify``: send ``[notify]`` notices for the run store's events until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, project_option


@click.command("notify")
@project_option
@click.option("--link", help="Address to put in every notice (e.g. the web monitor's).")
@config_option
def command(link: str | None, config_path: pathlib.Path | None) -> None:
    """Notify on approvals needed, questions, gates, tasks done or failed, STUCK agents.

    ``poli web`` does this by itself; run this when no web monitor is running.
    """
    from politerm.ui.notify import Notifier

    config = load(config_path)

    async def main() -> None:
        with open_store(config) as store:
            async with Notifier(config.notify, store, link=link).running():
                click.echo("poli notify: following the run store (Ctrl-C stops)")
                await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
