"""``poli agents``: the agent profiles, their programs and versions; ``check`` drives one."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shlex
import sys

import click

from politerm.agents.profile import list_profiles, load_profile
from politerm.canary.agentcheck import DEFAULT_PROMPT, check_agent, probe_all
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


@command.command("canary")
@click.argument("clis", nargs=-1)
@click.option(
    "--cache",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Where releases are installed (default: the user cache, politerm/canary).",
)
@click.option(
    "--bin",
    "bins",
    multiple=True,
    metavar="CLI=PATH",
    help="Run this installed binary of CLI instead of installing the newest release.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--ready-timeout", default=120.0, show_default=True, help="Seconds to get ready.")
@click.option("--turn-timeout", default=120.0, show_default=True, help="Seconds for each turn.")
def canary(
    clis: tuple[str, ...],
    cache: pathlib.Path | None,
    bins: tuple[str, ...],
    as_json: bool,
    ready_timeout: float,
    turn_timeout: float,
) -> None:
    """Install the newest release of each CLI (default: all) and run the checks on it.

    The checks (ready, deliver, block, approval, two turns; then the Planner⇄Executer loop
    under approval "ask" with patterns: a command taller than the screen, two tasks in a
    row) run against a loopback model server; the table shows each one, and the screen
    lines where a detector broke.
    """
    import dataclasses

    from politerm.canary import render, run_canary
    from politerm.errors import CanaryError

    paths: dict[str, pathlib.Path] = {}
    for item in bins:
        cli, sep, path = item.partition("=")
        if not sep or not cli or not path:
            msg = f"--bin {item!r}: expected CLI=PATH"
            raise click.BadParameter(msg, param_hint="--bin")
        paths[cli] = pathlib.Path(path).expanduser().resolve()

    def say(line: str) -> None:
        if not as_json:
            click.echo(line, err=True)

    try:
        results = asyncio.run(
            run_canary(
                list(clis),
                cache=cache,
                bins=paths,
                ready_timeout=ready_timeout,
                turn_timeout=turn_timeout,
                say=say,
            )
        )
    except CanaryError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    else:
        show(render(results))
    if not all(r.ok for r in results):
        raise SystemExit(1)
