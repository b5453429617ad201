"""``poli answer``: reply to a question an agent asked."""

from __future__ import annotations

import pathlib

import click

from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, project_option
from politerm.engine.loop import answer
from politerm.errors import RoutingError


@click.command("answer")
@click.argument("task_id", shell_complete=_complete.task_ids)
@click.argument("text")
@config_option
@project_option
def command(task_id: str, text: str, config_path: pathlib.Path | None) -> None:
    """Answer TASK_ID's question with TEXT; the router delivers it to the asking agent."""
    config = load(config_path)
    with open_store(config) as store:
        if config.fleet is not None and store.get_task(task_id) is None:
            # A fleet's tasks live with its router: this node has none of them.
            msg = (
                f"no task {task_id!r} on node {config.fleet.node}: answer on the machine "
                "that runs the router (`poli up`, `poli task`); approvals work from any node"
            )
            raise RoutingError(msg)
        answer(store, config, task_id, text)
    click.echo(f"answered {task_id}")
