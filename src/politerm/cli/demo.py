"""``poli demo``: Planner⇄Executer on the bundled fake agents, start to finish."""

from __future__ import annotations

import asyncio
import sys

import click

from politerm.cli._common import print_event
from politerm.engine.demo import run_demo
from politerm.store.models import TaskState


@click.command("demo")
@click.option("--keep", is_flag=True, help="Leave the session running (attach to look).")
def command(keep: bool) -> None:
    """Bring up a fake Planner and Executer, route one task with every hop shown, tear down."""
    task, hello = asyncio.run(run_demo(say=click.echo, printer=print_event, keep=keep))
    if task.state is not TaskState.DONE:
        click.echo(f"demo failed: {task.state.value}: {task.error}", err=True)
        sys.exit(1)
    click.echo(f"\nfinal report ({task.id}):\n{task.report}")
    click.echo(f"\nthe executer's hello.txt: {hello or '(missing)'}")
