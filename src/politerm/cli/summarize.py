"""``poli summarize EPIC``: write the omnibus summary now."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import click

from politerm.cli._common import config_option, load, open_store
from politerm.epic.go import EpicRunner, GoOptions


@click.command("summarize")
@click.argument("epic")
@click.option("--agent", help="Agent profile to run (default: [epic] agent).")
@click.option("--chunk-chars", type=click.IntRange(200), help="Most characters per prompt.")
@click.option("--no-interactive", is_flag=True, help="No live view.")
@click.option("--tmux", "use_tmux", is_flag=True, help="Run sessions in tmux panes, not a PTY.")
@config_option
def command(
    epic: str,
    agent: str | None,
    chunk_chars: int | None,
    no_interactive: bool,
    use_tmux: bool,
    config_path: pathlib.Path | None,
) -> None:
    """Summarize EPIC's session records into one commit narrative, and record it."""
    config = load(config_path)
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    options = GoOptions(
        epic=epic,
        agent=agent,
        interactive=tty and not no_interactive,
        yes=True,
        tmux=use_tmux,
        chunk_chars=chunk_chars,
    )
    with open_store(config) as store:
        runner = EpicRunner(
            config,
            store,
            options,
            cwd=pathlib.Path.cwd(),
            say=lambda line: click.echo(f"poli: {line}", err=True),
        )
        record = asyncio.run(runner.summarize())
    click.echo(f"{record.commit_summary or ''}\n\n{record.commit_body or ''}")
