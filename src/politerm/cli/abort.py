"""``poli abort``: stop a task and interrupt the agents working on it."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option, load, open_store
from politerm.engine.loop import abort


@click.command("abort")
@click.argument("task_id", required=False)
@config_option
def command(task_id: str | None, config_path: pathlib.Path | None) -> None:
    """Abort TASK_ID (default: the newest active task)."""
    config = load(config_path)
    with open_store(config) as store:
        task = asyncio.run(abort(config, store, task_id))
    click.echo(f"aborted {task.id}")
