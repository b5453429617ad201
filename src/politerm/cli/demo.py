"""``poli demo [NAME]``: a workflow start to finish on the bundled fake agents."""

from __future__ import annotations

import sys

import click

from politerm.cli._common import print_event
from politerm.demos import NAMES, run_demo


@click.command("demo")
@click.argument("name", type=click.Choice(NAMES), default=NAMES[0])
@click.option("--keep", is_flag=True, help="Leave it running and print how to look and tear down.")
def command(name: str, keep: bool) -> None:
    """Run one workflow (default: the Planner⇄Executer loop) on the fake agents, then clean up.

    Each demo works in its own scratch directory and private tmux server, and removes both
    at the end unless --keep.
    """
    click.echo(f"demo {name}: starting in a scratch directory of its own")
    # The loop's every hop is worth showing as it happens.
    options = {"printer": print_event} if name == "loop" else {}
    outcome = run_demo(name, say=click.echo, keep=keep, **options)
    click.echo("")
    for line in outcome.summary:
        click.echo(line)
    click.echo("")
    for line in outcome.look or [
        "cleaned up: its scratch directory and tmux server (if any) are gone",
        f"to look around in them, run it again with: poli demo {name} --keep",
    ]:
        click.echo(line)
    if not outcome.ok:
        click.echo(f"demo {name} failed", err=True)
        sys.exit(1)
    click.echo(f"demo {name}: done")
