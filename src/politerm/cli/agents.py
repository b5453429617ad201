"""``poli agents``: the agent profiles, their programs and versions; ``check`` drives one."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shlex
import sys

import click

from politerm.agents.check import DEFAULT_PROMPT, check_agent, probe_all
from politerm.agents.profile import list_profiles, load_profile
from politerm.cli._output import show


@click.group("agents", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.option(
    "--timeout", default=10.0, show_default=True, help="Seconds allowed for each --version run."
)
@click.pass_context
def command(ctx: click.Context, as_json: bool, timeout: float) -> None:
    """List agent profiles, which programs are installed, and their versions."""
    if ctx.invoked_subcommand is not None:
        return
    profiles = [load_profile(name) for name in list_profiles()]
    infos = probe_all(profiles, timeout=timeout)
    if as_json:
        click.echo(json.dumps([info.__dict__ for info in infos], indent=2))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="agent profiles", expand=True)
    for col in ("profile", "program", "found at", "version", "description"):
        table.add_column(col, overflow="fold")
    for info in infos:
        found = info.path or ("-" if info.program is None else Text(info.error or "", "red"))
        version = info.version or (Text(info.error, "yellow") if info.path and info.error else "-")
        table.add_row(info.name, info.program or "-", found, version, info.description)
    show(table)


@command.command("check")
@click.argument("name")
@click.option("--command", "argv", help="Run this command line instead of the profile's.")
@click.option("--prompt", default=DEFAULT_PROMPT, show_default=True, help="The one-line prompt.")
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Working directory of the agent (default: a scratch directory).",
)
@click.option("--unsafe", is_flag=True, help="Add the profile's skip-permission arguments.")
@click.option("--ready-timeout", default=60.0, show_default=True, help="Seconds to get ready.")
@click.option("--reply-timeout", default=120.0, show_default=True, help="Seconds to reply.")
def check(
    name: str,
    argv: str | None,
    prompt: str,
    cwd: pathlib.Path | None,
    unsafe: bool,
    ready_timeout: float,
    reply_timeout: float,
) -> None:
    """Start agent NAME in a scratch pane, prompt it once, and report what was seen."""
    profile = load_profile(name)

    def say(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    report = asyncio.run(
        check_agent(
            profile,
            argv=shlex.split(argv) if argv else None,
            cwd=cwd,
            prompt=prompt,
            ready_timeout=ready_timeout,
            reply_timeout=reply_timeout,
            unsafe=unsafe,
            say=say,
        )
    )
    verdict = "works" if report.ok else "FAILED"
    click.echo(f"{profile.name}: {verdict}")
    if not report.ok:
        raise SystemExit(1)
