"""``poli task``: give the Planner a task and follow it hop by hop to its report."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import click

from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine.loop import run_task, submit
from politerm.engine.session import Session
from politerm.store.models import TaskState


@click.command("task")
@click.argument("request")
@click.option("--id", "task_id", help="Task id (default: time + random suffix).")
@click.option("--no-wait", is_flag=True, help="Queue the task and return at once.")
@click.option("--timeout", type=float, default=None, help="Give up following after N seconds.")
@config_option
@project_option
def command(
    request: str,
    task_id: str | None,
    no_wait: bool,
    timeout: float | None,
    config_path: pathlib.Path | None,
) -> None:
    """Route REQUEST: User → Planner → Executer → Planner ... until a final report."""
    config = load(config_path)
    with open_store(config) as store:
        if no_wait:
            task = submit(store, config, request, task_id=task_id)
            click.echo(f"queued {task.id}")
            return

        async def main() -> TaskState:
            session = Session(config, store)
            try:
                if not await session.is_up():
                    await session.up(on_event=click.echo)
            finally:
                await session.server.close()
            task = await run_task(
                config, store, request, task_id=task_id, printer=print_event, timeout=timeout
            )
            if task.state is TaskState.DONE:
                click.echo(f"\nfinal report ({task.id}):\n{task.report or ''}")
            elif task.state is TaskState.WAITING_USER:
                click.echo(
                    f"\n{task.id} asks: {task.question}\nanswer with: poli answer {task.id} '…'"
                )
            else:
                click.echo(f"\n{task.id} {task.state.value}: {task.error}", err=True)
            return task.state

        state = asyncio.run(main())
    if state is TaskState.WAITING_USER:
        sys.exit(3)
    if state is not TaskState.DONE:
        sys.exit(1)
