"""``poli resume``: continue an interrupted pipeline run."""

from __future__ import annotations

import asyncio
import sys

import click

from politerm.cli import _complete
from politerm.cli._common import process_config_option
from politerm.pipeline.model import RunStatus


@click.command("resume")
@click.option("--project", type=click.Path(file_okay=False), default=".", show_default=True)
@click.option(
    "--run-id",
    shell_complete=_complete.run_ids,
    help="The run to continue (default: the latest of the project).",
)
@click.option(
    "--keep", is_flag=True, help="Keep the session when the run ends (poli down --run-id)."
)
@process_config_option
def command(project: str, run_id: str | None, keep: bool) -> None:
    """Continue a run from its last completed step, re-running an interrupted one."""
    from politerm.pipeline import ops

    state = asyncio.run(
        ops.resume_run(
            project=ops.project_dir(project),
            run_id=run_id,
            say=lambda line: click.echo(line),
            keep=keep,
        )
    )
    status = state.record.status
    click.echo(f"run {state.run_id}: {status.value}")
    sys.exit(0 if status is RunStatus.DONE else 130 if status is RunStatus.INTERRUPTED else 1)
