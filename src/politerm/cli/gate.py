"""``poli gate``: answer the question a pipeline run is waiting on."""

from __future__ import annotations

import click

from politerm.cli import _complete
from politerm.cli._common import process_config_option


@click.command("gate")
@click.argument("answer", type=click.Choice(["y", "n", "r", "s"], case_sensitive=False))
@click.option("--project", type=click.Path(file_okay=False), default=".", show_default=True)
@click.option(
    "--run-id",
    shell_complete=_complete.run_ids,
    help="The run (default: the latest one waiting for an answer).",
)
@process_config_option
def command(answer: str, project: str, run_id: str | None) -> None:
    """Answer a gate or a failed step: y continue, n abort, r re-run, s skip."""
    from politerm.pipeline import ops

    question = ops.answer(ops.project_dir(project), run_id, answer, by="poli gate")
    click.echo(f"step {question['step']}: answered {answer.lower()}")
