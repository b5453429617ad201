"""``poli list``: the pipelines a project can run."""

from __future__ import annotations

import json

import click

from politerm.cli._common import process_config_option


@click.command("list")
@click.option("--project", type=click.Path(file_okay=False), default=".", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@process_config_option
def command(project: str, as_json: bool) -> None:
    """List pipelines from the project, the user config dir and the built-ins."""
    from politerm.errors import PipelineInvalid
    from politerm.pipeline import ops
    from politerm.pipeline.agents import list_pipelines
    from politerm.pipeline.parser import load_pipeline

    root = ops.project_dir(project)
    rows = []
    for found in list_pipelines(root):
        try:
            pipe = load_pipeline(found.path, root)
            about, steps = pipe.description, len(pipe.steps)
        except PipelineInvalid as exc:
            about, steps = f"INVALID: {exc}", 0
        rows.append(
            {
                "name": found.name,
                "source": found.source + (" (shadowed)" if found.shadowed else ""),
                "steps": steps,
                "description": about,
                "path": str(found.path),
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(
            f"{row['name']:<16} {row['source']:<18} {row['steps']:>2} steps  {row['description']}"
        )
