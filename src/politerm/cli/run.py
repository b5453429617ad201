"""``poli run``: run a pipeline in a tmux session (``meta run``'s flags included)."""

from __future__ import annotations

import asyncio
import pathlib
import sys
import typing as t

import click

from politerm.cli import _complete
from politerm.cli._common import process_config_option
from politerm.errors import PipelineError
from politerm.pipeline.launch import DEFAULT_CLI
from politerm.pipeline.model import RunStatus

if t.TYPE_CHECKING:
    from politerm.pipeline.state import RunState

_EXIT = {RunStatus.DONE: 0, RunStatus.INTERRUPTED: 130, RunStatus.WAITING: 130}


def failure_policy(
    on_fail: str | None, max_retries: int | None, no_auto_retry: bool, *, meta: bool
) -> str:
    """The ``--on-fail`` policy from it or META's ``--max-retries N`` / ``--no-auto-retry``.

    META retries a failed step 3 times by default; a pipeline from a META repository keeps
    that default, any other asks.

    Examples
    --------
    >>> failure_policy(None, None, False, meta=True), failure_policy(None, 2, False, meta=False)
    ('retry:3', 'retry:2')
    >>> failure_policy(None, None, True, meta=True), failure_policy("skip", None, False, meta=True)
    ('ask', 'skip')
    """
    given = [on_fail is not None, max_retries is not None, no_auto_retry]
    if sum(given) > 1:
        msg = "give only one of --on-fail, --max-retries and --no-auto-retry"
        raise PipelineError(msg)
    if on_fail is not None:
        return on_fail
    if max_retries is not None:
        if max_retries < 0:
            msg = f"--max-retries must be a whole number >= 0, got {max_retries}"
            raise PipelineError(msg)
        return f"retry:{max_retries}"  # 0: no retry, the run stops
    if no_auto_retry:
        return "ask"
    return "retry:3" if meta else "ask"


@click.command("run")
@click.argument("pipeline", shell_complete=_complete.pipelines)
@click.option("--project", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The project directory the agents work in.")  # fmt: skip
@click.option("--task", help="What the pipeline should achieve (required unless --continue).")
@click.option("--cli", "cli_name", default=None,
              help="Agent CLI for every step, as meta run --cli (default: each step's CLI "
              "column, claude for '-'); 'fake' runs every step on the bundled fake "
              "agent.")  # fmt: skip
@click.option("--run-id", help="Run id (default: UTC timestamp + random suffix).")
@click.option("--unsafe", is_flag=True, help="Add the agents' skip-permissions flag.")
@click.option("--headless", is_flag=True,
              help="Run steps one-shot (claude -p, codex exec); done by exit code.")  # fmt: skip
@click.option("--worktrees", "use_worktrees", is_flag=True,
              help="Run each parallel step in its own git worktree and branch.")  # fmt: skip
@click.option("--on-fail", default=None,
              help="A failed step: ask, retry:N, skip or abort (default: ask; retry:3 for a "
              "pipeline from a META repository, as META).")  # fmt: skip
@click.option("--max-retries", type=int, default=None, metavar="N",
              help="Retry a failed step up to N times, then abort (META's flag).")  # fmt: skip
@click.option("--no-auto-retry", is_flag=True, help="Ask when a step fails (META's flag).")
@click.option("--auto-approve", is_flag=True, help="Approve every gate without asking.")
@click.option("--no-auto-commit", is_flag=True,
              help="Accepted for META: politerm commits only in --worktrees branches, which "
              "the merge needs, so this cannot go with --worktrees.")  # fmt: skip
@click.option("--continue", "cont", is_flag=True,
              help="Continue the project's latest run (as poli resume).")  # fmt: skip
@click.option("--agents", "agents", multiple=True,
              type=click.Path(file_okay=False, exists=True, path_type=pathlib.Path),
              help="A directory of agent definitions searched first (repeatable).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print what would run; start nothing.")
@click.option("--keep", is_flag=True,
              help="Keep the session when the run ends (poli down --run-id).")  # fmt: skip
@process_config_option
def command(  # one parameter per flag, as click passes them
    pipeline: str,
    project: str,
    task: str | None,
    cli_name: str | None,
    run_id: str | None,
    unsafe: bool,
    headless: bool,
    use_worktrees: bool,
    on_fail: str | None,
    max_retries: int | None,
    no_auto_retry: bool,
    auto_approve: bool,
    no_auto_commit: bool,
    cont: bool,
    agents: tuple[pathlib.Path, ...],
    dry_run: bool,
    keep: bool,
) -> None:
    """Run PIPELINE (a name or a .pipeline file) on the project."""
    from politerm.pipeline import ops
    from politerm.pipeline.agents import find_pipeline, meta_root
    from politerm.pipeline.parser import load_pipeline
    from politerm.pipeline.state import new_run_id

    root = ops.project_dir(project)
    if cont:
        from politerm.pipeline.state import latest_run_id, project_runs

        rid = latest_run_id(root)
        latest = project_runs(root)[-1].get("pipeline", "")
        if pathlib.Path(latest).resolve() != find_pipeline(pipeline, root):
            msg = f"--continue: the latest run ({rid}) is of {latest}, not {pipeline}"
            raise PipelineError(msg)
        state = asyncio.run(
            ops.resume_run(project=root, run_id=rid, say=lambda line: click.echo(line), keep=keep)
        )
        _finish(state)
        return
    if task is None:
        msg = "--task is required (or --continue to go on with the latest run)"
        raise PipelineError(msg)
    if no_auto_commit and use_worktrees:
        msg = "--no-auto-commit cannot go with --worktrees: branches are merged from commits"
        raise PipelineError(msg)
    path = find_pipeline(pipeline, root)
    policy = failure_policy(on_fail, max_retries, no_auto_retry, meta=meta_root(path) is not None)
    cli = cli_name or DEFAULT_CLI
    if dry_run:
        from politerm.config import load_config
        from politerm.pipeline.agents import AgentSearch
        from politerm.pipeline.dry_run import dry_run as plan
        from politerm.pipeline.handoff import layout_for

        config = load_config(root)
        pipe = load_pipeline(path, root, agents=agents)
        text = plan(
            pipe,
            project=root,
            task=task,
            cli=cli,
            run_id=run_id or new_run_id(),
            socket=config.tmux.socket,
            headless=headless,
            unsafe=unsafe,
            use_worktrees=use_worktrees,
            on_fail=policy,
            override=cli_name is not None,
            auto_approve=auto_approve,
            layout=layout_for(pipe.path, config.pipeline.handoff_dir),
            search=AgentSearch.for_run(root, pipeline=pipe.path, extra=agents),
        )
        click.echo(text, nl=False)
        return
    state = asyncio.run(
        ops.run_new(
            str(path),
            project=root,
            task=task,
            cli=cli,
            run_id=run_id or new_run_id(),
            headless=headless,
            unsafe=unsafe,
            use_worktrees=use_worktrees,
            on_fail=policy,
            say=lambda line: click.echo(line),
            cli_override=cli_name is not None,
            auto_approve=auto_approve,
            agents=agents,
            keep=keep,
        )
    )
    _finish(state)


def _finish(state: RunState) -> None:
    status = state.record.status
    click.echo(f"run {state.run_id}: {status.value}")
    sys.exit(_EXIT.get(status, 1))
