"""``poli doctor``: check tmux, the socket directory, agents, dependencies and the config."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from politerm.cli._common import config_option
from politerm.cli._output import show
from politerm.doctor import DoctorContext, doctor_timeout, exit_code, render_table, run_checks


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
@config_option
@click.option(
    "--project",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Check this project (its poli.toml, pipelines and agents; META's layout too).",
)
def command(as_json: bool, config_path: Path | None, project: Path | None) -> None:
    """Check that this machine can run politerm; exit 1 if any check FAILs."""
    env = dict(os.environ)
    ctx = DoctorContext(
        env=env, project_dir=project, config_path=config_path, timeout=doctor_timeout(env)
    )
    rows = run_checks(ctx)
    if as_json:
        click.echo(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        show(render_table(rows))
    # SystemExit, not ctx.exit(): in non-standalone mode click returns an Exit's code
    # instead of raising it, and ``politerm.cli.main`` does not look at return values.
    if (code := exit_code(rows)) != 0:
        sys.exit(code)
