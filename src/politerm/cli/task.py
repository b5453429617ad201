"""``poli task``: give the Planner a task and follow it hop by hop to its report."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import click

from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, print_event, project_option
from politerm.engine import service
from politerm.engine.loop import follow_task, submit
from politerm.engine.session import Session
from politerm.errors import RoutingError
from politerm.store.models import TaskState


@click.command("task")
@click.argument("request", required=False)
@click.option("--id", "task_id", help="Task id (default: time + random suffix).")
@click.option("--no-wait", is_flag=True, help="Queue the task and return at once.")
@click.option(
    "--follow",
    "follow_id",
    metavar="TASK_ID",
    shell_complete=_complete.task_ids,
    help="Follow a task given before (after Ctrl-C) instead of giving a new one.",
)
@click.option("--timeout", type=float, default=None, help="Give up following after N seconds.")
@config_option
@project_option
def command(
    request: str | None,
    task_id: str | None,
    no_wait: bool,
    follow_id: str | None,
    timeout: float | None,
    config_path: pathlib.Path | None,
) -> None:
    """Route REQUEST: User → Planner → Executer → Planner ... until a final report.

    The project's router service (started with the agents) routes it; this command follows
    its events. Ctrl-C only stops following: the task goes on.
    """
    if (request is None) == (follow_id is None):
        msg = "give a REQUEST, or --follow TASK_ID (not both)"
        raise click.UsageError(msg)
    config = load(config_path)
    with open_store(config) as store:
        if no_wait and request is not None:
            task = submit(store, config, request, task_id=task_id)
            service.ensure(config, config_path)  # a service killed with -9 comes back for it
            click.echo(f"queued {task.id}")
            return

        async def main() -> TaskState:
            session = Session(config, store)
            try:
                if not await session.is_up():
                    await session.up(on_event=click.echo)
            finally:
                await session.host.close()
            # Routing goes on after this command: the service routes, not this process.
            service.start(config, config_path)
            tid = follow_id or submit(store, config, request or "", task_id=task_id).id
            shown[0] = tid
            after = None
            if follow_id is None:
                events = store.list_events(task_id=tid, limit=5)
                after = min((e.id for e in events), default=1) - 1
            task = await follow_task(
                config, store, tid, printer=print_event, timeout=timeout, after=after
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

        shown: list[str | None] = [follow_id]
        try:
            state = asyncio.run(main())
        except KeyboardInterrupt:
            tid = shown[0]
            if tid is None:
                raise
            click.echo(
                f"\ndetached from {tid}; it goes on (the project's router service routes it)\n"
                f"  follow: poli task --follow {tid}\n"
                f"  abort:  poli abort {tid}\n"
                "  no router running (poli status)? `poli up` starts it again",
                err=True,
            )
            sys.exit(130)
        except RoutingError as exc:
            if shown[0] is None:
                raise
            msg = f"{exc}; follow it again: poli task --follow {shown[0]}"
            raise RoutingError(msg) from None
    if state is TaskState.WAITING_USER:
        sys.exit(3)
    if state is not TaskState.DONE:
        sys.exit(1)
