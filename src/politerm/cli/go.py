"""``poli go EPIC``: one agent session per ready work item, then the omnibus summary."""

from __future__ import annotations

import asyncio
import pathlib
import shlex
import sys

import click

from politerm.cli._common import config_option, load, open_store
from politerm.epic.go import Choice, EpicRunner, GoOptions
from politerm.store.epics import WorkItem


def _confirm(item: WorkItem, prompt: str) -> Choice:
    click.echo(click.style(f"--- prompt for {item.id}: {item.title} ---", bold=True))
    click.echo(prompt.rstrip())
    click.echo(click.style("--- end of prompt ---", bold=True))
    answer = click.prompt(
        "Run this session? [y]es / [s]kip / [q]uit",
        type=click.Choice(["y", "s", "q"]),
        default="y",
        show_choices=False,
    )
    return {"y": Choice.RUN, "s": Choice.SKIP, "q": Choice.QUIT}[answer]


@click.command("go")
@click.argument("epic")
@click.option("--agent", help="Agent profile to run (default: [epic] agent).")
@click.option(
    "--tee",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    help="Append the sessions' transcripts (redacted) to this file.",
)
@click.option(
    "--resume", "resume", metavar="RUN_ID", help="Go on with a run; skip its finished items."
)
@click.option("--no-interactive", is_flag=True, help="No live view (for logs and pipes).")
@click.option(
    "--dry-run", is_flag=True, help="Show the ready items and their prompts; run nothing."
)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before each session.")
@click.option("--no-summary", is_flag=True, help="Do not write the omnibus summary at the end.")
@click.option("--tmux", "use_tmux", is_flag=True, help="Run sessions in tmux panes, not a PTY.")
@config_option
def command(
    epic: str,
    agent: str | None,
    tee: pathlib.Path | None,
    resume: str | None,
    no_interactive: bool,
    dry_run: bool,
    yes: bool,
    no_summary: bool,
    use_tmux: bool,
    config_path: pathlib.Path | None,
) -> None:
    """Burn down EPIC: one scoped agent session per ready work item, each ending in a report."""
    config = load(config_path)
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    if not (yes or dry_run or sys.stdin.isatty()):
        msg = "stdin is not a terminal, so no one can confirm sessions: pass --yes"
        raise click.UsageError(msg)
    options = GoOptions(
        epic=epic,
        agent=agent,
        tee=tee.absolute() if tee else None,
        resume=resume,
        interactive=tty and not no_interactive,
        dry_run=dry_run,
        yes=yes,
        summary=not no_summary,
        tmux=use_tmux,
    )
    with open_store(config) as store:
        runner = EpicRunner(
            config,
            store,
            options,
            cwd=pathlib.Path.cwd(),
            say=lambda line: click.echo(f"poli: {line}", err=True),
            confirm=_confirm,
        )
        result = asyncio.run(runner.go())
        if dry_run:
            where = "a tmux pane" if use_tmux else "a headless PTY"
            click.echo(f"agent {runner.agent}: {shlex.join(runner.argv)}")
            click.echo(f"each session runs that in {where}, in {runner.repo}")
    for item, prompt in result.previews:
        click.echo(
            click.style(f"=== {item.id} (priority {item.priority}): {item.title}", bold=True)
        )
        click.echo(prompt)
    if dry_run and not result.previews:
        click.echo(f"epic {epic}: no ready items")
    if result.summary is not None:
        click.echo(f"{result.summary.commit_summary or ''}\n\n{result.summary.commit_body or ''}")
    if result.run_id:
        click.echo(f"poli: run {result.run_id} {result.state}", err=True)
    sys.exit(result.exit_code)
