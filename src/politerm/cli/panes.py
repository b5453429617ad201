"""``poli panes``: the panes of the private tmux server and the programs running in them."""

from __future__ import annotations

import asyncio
import pathlib
import typing as t

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import echo_json, load_messaging
from politerm.driver.observer import Observer

if t.TYPE_CHECKING:
    from politerm.driver.processes import PaneProcesses


@click.command("panes")
@click.option(
    "--running",
    "program",
    help="Only panes whose process tree runs PROGRAM (a name, or any piece of a command line).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def command(program: str | None, as_json: bool, config_path: pathlib.Path | None) -> None:
    """List panes with their agent and the programs in their process trees."""
    config = load_messaging(config_path)

    async def main() -> list[PaneProcesses]:
        async with Observer.of(config) as observer:
            return await observer.processes()

    panes = asyncio.run(main())
    if program is not None:
        panes = [p for p in panes if not p.dead and p.runs(program)]
    if as_json:
        echo_json([p.to_json() for p in panes])
        return
    if not panes:
        which = f" running {program}" if program is not None else ""
        click.echo(f"no panes{which} on socket {config.tmux.socket!r}; start agents with `poli up`")
    for p in panes:
        state = "dead" if p.dead else "live"
        click.echo(
            f"{p.pane_id:<5} {p.session}:{p.window:<12} {state:<4} {p.agent or '-':<10} "
            f"{' '.join(p.programs)}"
        )
