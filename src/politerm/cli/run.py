"""``poli run``: run a pipeline in a tmux session."""

from __future__ import annotations

import asyncio
import sys

import click

from politerm.pipeline.model import RunStatus

_EXIT = {RunStatus.DONE: 0, RunStatus.INTERRUPTED: 130, RunStatus.WAITING: 130}


@click.command("run")
@click.argument("pipeline")
@click.option("--project", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The project directory the agents work in.")  # fmt: skip
@click.option("--task", required=True, help="What the pipeline should achieve.")
@click.option("--cli", "cli_name", default="claude", show_default=True,
              help="Agent CLI for steps whose CLI column is '-'; 'fake' runs every step on "
              "the bundled fake agent.")  # fmt: skip
@click.option("--run-id", help="Run id (default: UTC timestamp + random suffix).")
@click.option("--unsafe", is_flag=True, help="Add the agents' skip-permissions flag.")
@click.option("--headless", is_flag=True,
              help="Run steps one-shot (claude -p, codex exec); done by exit code.")  # fmt: skip
@click.option("--worktrees", "use_worktrees", is_flag=True,
              help="Run each parallel step in its own git worktree and branch.")  # fmt: skip
@click.option("--on-fail", default="ask", show_default=True,
              help="A failed step: ask, retry:N, skip or abort.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print what would run; start nothing.")
def command(
    pipeline: str,
    project: str,
    task: str,
    cli_name: str,
    run_id: str | None,
    unsafe: bool,
    headless: bool,
    use_worktrees: bool,
    on_fail: str,
    dry_run: bool,
) -> None:
    """Run PIPELINE (a name or a .pipeline file) on the project."""
    from politerm.pipeline import ops
    from politerm.pipeline.agents import find_pipeline
    from politerm.pipeline.parser import load_pipeline
    from politerm.pipeline.state import new_run_id

    root = ops.project_dir(project)
    if dry_run:
        from politerm.config import load_config
        from politerm.pipeline.dry_run import dry_run as plan

        pipe = load_pipeline(find_pipeline(pipeline, root), root)
        text = plan(
            pipe,
            project=root,
            task=task,
            cli=cli_name,
            run_id=run_id or new_run_id(),
            socket=load_config(root).tmux.socket,
            headless=headless,
            unsafe=unsafe,
            use_worktrees=use_worktrees,
            on_fail=on_fail,
        )
        click.echo(text, nl=False)
        return
    state = asyncio.run(
        ops.run_new(
            pipeline,
            project=root,
            task=task,
            cli=cli_name,
            run_id=run_id,
            headless=headless,
            unsafe=unsafe,
            use_worktrees=use_worktrees,
            on_fail=on_fail,
            say=lambda line: click.echo(line),
        )
    )
    status = state.record.status
    click.echo(f"run {state.run_id}: {status.value}")
    sys.exit(_EXIT.get(status, 1))
