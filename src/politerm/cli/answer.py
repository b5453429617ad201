"""``poli answer``: reply to a question an agent asked."""

from __future__ import annotations

import pathlib

import click

from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, project_option
from politerm.engine.loop import answer


@click.command("answer")
@click.argument("task_id", shell_complete=_complete.task_ids)
@click.argument("text")
@config_option
@project_option
def command(task_id: str, text: str, config_path: pathlib.Path | None) -> None:
    """Answer TASK_ID's question with TEXT; the router delivers it to the asking agent.

    In a fleet, on a machine whose store does not hold the task, the answer goes through
    Redis to the router holding the fleet's router role, which applies it at once.
    """
    config = load(config_path)
    with open_store(config) as store:
        if config.fleet is not None and store.get_task(task_id) is None:
            from politerm.engine.fleetanswers import answer_task_remote
            from politerm.engine.fleetlink import open_queue

            queue = open_queue(config, store)
            try:
                said = answer_task_remote(
                    queue,
                    task_id,
                    text,
                    by=f"poli answer on node {config.fleet.node}",
                    lease=config.fleet.lease,
                )
            finally:
                queue.conn.close()
            click.echo(said)
            return
        answer(store, config, task_id, text)
    click.echo(f"answered {task_id}")
