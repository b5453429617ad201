"""``poli down``: stop every agent (whole process trees) and the session."""

from __future__ import annotations

import asyncio
import os
import pathlib

import click

from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, project_option
from politerm.engine import service
from politerm.engine.placement import hosted_here, node_config
from politerm.engine.session import Session
from politerm.project import PROJECT_ENV


@click.command("down")
@click.option(
    "--run-id",
    shell_complete=_complete.run_ids,
    help="Close the session a finished pipeline run kept (run --keep).",
)
@config_option
@project_option
def command(run_id: str | None, config_path: pathlib.Path | None) -> None:
    """Kill the session and every agent process tree, verified gone.

    With --run-id, close a finished pipeline run's session instead.
    """
    if run_id is not None:
        from politerm.pipeline import ops

        root = ops.project_dir(os.environ.get(PROJECT_ENV) or ".")
        state = asyncio.run(ops.close_run(project=root, run_id=run_id))
        click.echo(f"down: run {state.run_id} ({state.record.status.value}): session closed")
        return
    config = load(config_path)
    with open_store(config) as store:
        routed = service.stop(config)
        noded = service.stop(config, service.NODE)

        async def main() -> tuple[str | None, list[str]]:
            from politerm.manager.pane import close_sessions

            session = Session(config, store)
            try:
                up = session.name if await session.is_up() else None
                stopped = await session.down()
            finally:
                await session.host.close()
            if config.fleet is not None:
                # The agents this machine's node started for the fleet's work.
                hosted = hosted_here(config, config.fleet.node)
                nodes = Session(node_config(config, hosted), store)
                try:
                    stopped += await nodes.down() if await nodes.is_up() else []
                finally:
                    await nodes.host.close()
            # Whichever workflow started them: the manager's brain and dev agents too.
            return up, stopped + await close_sessions(config)

        was_up, stopped = asyncio.run(main())
    # A session of other agents (a kept demo's, a manager's dev agent) is closed all the same.
    if was_up and not stopped:
        stopped = [f"session {was_up!r} closed"]
    if noded is not None:
        stopped = [f"node service (pid {noded.pid})", *stopped]
    if routed is not None:
        stopped = [f"router service (pid {routed.pid})", *stopped]
    click.echo(f"down: {', '.join(stopped) or 'nothing was running'}")
