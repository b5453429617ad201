"""``poli status``: agents, tasks, queued messages and recent events."""

from __future__ import annotations

import json
import pathlib
import time

import click

from politerm.cli._common import config_option, format_event, load, open_store
from politerm.status import collect, render


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--watch", is_flag=True, help="Refresh the table live until Ctrl-C.")
@config_option
def command(as_json: bool, watch: bool, config_path: pathlib.Path | None) -> None:
    """Show agents, tasks (with questions to answer), queued messages and recent events."""
    config = load(config_path)
    with open_store(config) as store:
        if as_json:
            click.echo(json.dumps(collect(store), indent=2, default=str))
            return
        from rich.console import Console
        from rich.live import Live

        console = Console(highlight=False)
        if not watch:
            console.print(render(collect(store), format_event))
            return
        with Live(render(collect(store), format_event), console=console, screen=False) as live:
            try:
                while True:
                    time.sleep(0.5)
                    live.update(render(collect(store), format_event))
            except KeyboardInterrupt:
                pass
