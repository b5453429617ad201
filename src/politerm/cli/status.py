"""``poli status``: agents, tasks, queued messages and recent events; pipeline runs."""

from __future__ import annotations

import json
import pathlib
import time

import click

from politerm._internal.sanitize import escape_controls, trusted_stdout
from politerm.cli._common import config_option, format_event, load, open_store
from politerm.status import collect, render
from politerm.store import RunStore


def _pipelines(project: pathlib.Path, run_id: str | None) -> list[dict[str, object]]:
    from politerm.pipeline.ops import project_status

    return project_status(project, run_id)


def _pipeline_text(runs: list[dict[str, object]]) -> str:
    from politerm.pipeline.ops import format_status

    return "\n\n".join(format_status(r) for r in runs) or "no pipeline runs"


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--watch", is_flag=True, help="Refresh the table live until Ctrl-C.")
@click.option("--project", type=click.Path(file_okay=False, path_type=pathlib.Path),
              help="Show the pipeline runs of this project.")  # fmt: skip
@click.option("--run-id", help="Show this pipeline run only.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="Read this run store instead of the configured one.")  # fmt: skip
@config_option
def command(
    as_json: bool,
    watch: bool,
    project: pathlib.Path | None,
    run_id: str | None,
    store_path: pathlib.Path | None,
    config_path: pathlib.Path | None,
) -> None:
    """Show agents, tasks (with questions to answer), queued messages and recent events.

    With --project or --run-id, show the progress of pipeline runs instead; without them,
    the runs of the current directory are shown too when it has any.
    """
    from politerm.pipeline.state import project_runs

    if project is not None or run_id is not None:
        root = (project or pathlib.Path.cwd()).resolve()
        _show_pipelines(root, run_id, as_json=as_json, watch=watch)
        return
    here = pathlib.Path.cwd()
    with_runs = bool(project_runs(here))
    config = load(config_path)
    with RunStore.open(store_path) if store_path else open_store(config) as store:
        if as_json:
            data = collect(store)
            if with_runs:
                data["pipelines"] = _pipelines(here, None)
            click.echo(json.dumps(data, indent=2, default=str))
            return
        from rich.console import Console, Group
        from rich.live import Live
        from rich.text import Text

        def view() -> Group:
            parts = [render(collect(store), format_event)]
            if with_runs:
                parts.append(Text("\npipeline runs", style="bold"))
                parts.append(Text(escape_controls(_pipeline_text(_pipelines(here, None)))))
            return Group(*parts)

        console = Console(highlight=False)
        if not watch:
            console.print(view())
            return
        with trusted_stdout(), Live(view(), console=console, screen=False) as live:
            try:
                while True:
                    time.sleep(0.5)
                    live.update(view())
            except KeyboardInterrupt:
                pass


def _show_pipelines(root: pathlib.Path, run_id: str | None, *, as_json: bool, watch: bool) -> None:
    if as_json:
        click.echo(json.dumps({"pipelines": _pipelines(root, run_id)}, indent=2, default=str))
        return
    if not watch:
        click.echo(_pipeline_text(_pipelines(root, run_id)))
        return
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def text() -> Text:
        return Text(escape_controls(_pipeline_text(_pipelines(root, run_id))))

    with trusted_stdout(), Live(text(), console=Console()) as live:
        try:
            while True:
                time.sleep(0.5)
                live.update(text())
        except KeyboardInterrupt:
            pass
