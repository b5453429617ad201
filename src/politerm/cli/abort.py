"""``poli abort``: stop a task and interrupt the agents working on it, or abort a pipeline run."""

from __future__ import annotations

import asyncio
import os
import pathlib

import click

from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store
from politerm.engine.loop import abort
from politerm.project import PROJECT_ENV


@click.command("abort")
@click.argument("task_id", required=False, shell_complete=_complete.task_ids)
@click.option(
    "--run-id", shell_complete=_complete.run_ids, help="Abort this pipeline run instead of a task."
)
@click.option("--project", type=click.Path(file_okay=False, path_type=pathlib.Path),
              help="The project of the task or run (default: the current one).")  # fmt: skip
@config_option
def command(
    task_id: str | None,
    run_id: str | None,
    project: pathlib.Path | None,
    config_path: pathlib.Path | None,
) -> None:
    """Abort TASK_ID (default: the newest active task), or a pipeline run with --run-id.

    A pipeline run's runner, session and every agent process tree are stopped, and its
    ``.poli/steps/<run id>/`` and state file are removed.
    """
    if run_id is not None or (project is not None and task_id is None):
        from politerm.pipeline.ops import abort_run, project_dir

        state = asyncio.run(abort_run(project=project_dir(project), run_id=run_id))
        click.echo(f"aborted run {state.run_id}")
        return
    if project is not None:
        os.environ[PROJECT_ENV] = str(project.resolve())  # the task's project
    config = load(config_path)
    with open_store(config) as store:
        task = asyncio.run(abort(config, store, task_id))
    click.echo(f"aborted {task.id}")
