"""``poli pipeline``: validate and show pipeline files (and the control window of a run)."""

from __future__ import annotations

import json
import pathlib
import sys

import click

from politerm.cli import _complete
from politerm.cli._common import process_config_option
from politerm.cli._output import show as show_output

_project = click.option(
    "--project", type=click.Path(file_okay=False), default=".", show_default=True,
    help="Where agent definitions are looked up first.",
)  # fmt: skip


_agents = click.option(
    "--agents", "agents", multiple=True,
    type=click.Path(file_okay=False, exists=True, path_type=pathlib.Path),
    help="A directory of agent definitions searched first (repeatable).",
)  # fmt: skip


@click.group("pipeline")
def command() -> None:
    """Validate and show .pipeline files."""


@command.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_project
@_agents
def validate(files: tuple[str, ...], project: str, agents: tuple[pathlib.Path, ...]) -> None:
    """Report every problem of FILES as file:line: message; exit 1 if there is any."""
    from politerm.pipeline import ops
    from politerm.pipeline.parser import validate_file

    root = ops.project_dir(project)
    bad = 0
    for path in files:
        problems = validate_file(path, root, agents=agents)
        for line in problems:
            click.echo(line)
        if problems:
            bad += 1
        else:
            click.echo(f"{path}: ok")
    if bad:
        sys.exit(1)


@command.command("show")
@click.argument("pipeline", shell_complete=_complete.pipelines)
@_project
@_agents
@click.option("--json", "as_json", is_flag=True, help="Print the parsed plan as JSON.")
def show(pipeline: str, project: str, agents: tuple[pathlib.Path, ...], as_json: bool) -> None:
    """Print the parsed plan of PIPELINE (a name or a file) as a table."""
    from politerm.pipeline import ops
    from politerm.pipeline.agents import find_pipeline
    from politerm.pipeline.parser import load_pipeline

    root = ops.project_dir(project)
    pipe = load_pipeline(find_pipeline(pipeline, root), root, agents=agents)
    if as_json:
        click.echo(json.dumps(pipe.as_dict(), indent=2))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{pipe.name}: {pipe.description} (timeout {pipe.timeout_min:g} min)")
    for col in ("#", "agent", "cli", "gate", "group", "timeout", "prompt"):
        table.add_column(col, overflow="fold")
    for s in pipe.steps:
        table.add_row(
            str(s.num), s.agent, s.cli or "-", s.gate.value, s.group or "-",
            f"{s.timeout_min:g}" if s.timeout_min is not None else "-", Text(s.prompt),
        )  # fmt: skip
    show_output(table)


@command.command("control", hidden=True)
@_project
@process_config_option
@click.option("--run-id", required=True)
def control(project: str, run_id: str) -> None:
    """The control window of a run (window 0 of its session)."""
    from politerm.pipeline import ops
    from politerm.pipeline.control import control as show

    sys.exit(show(ops.project_dir(project), run_id))
