"""The ``poli`` command line: one module per command, each thin over the library."""

from __future__ import annotations

import importlib
import os
import sys
import typing as t

import click

from politerm import __version__
from politerm._internal import sanitize
from politerm.cli._errors import check_arguments, check_width, describe_os_error
from politerm.errors import PolitermError

# command name -> module under politerm.cli holding a click command called ``command``
_COMMANDS: dict[str, str] = {
    "abort": "abort",
    "agents": "agents",
    "approve": "approve",
    "answer": "answer",
    "attach": "attach",
    "demo": "demo",
    "down": "down",
    "fleet": "fleet",
    "node": "node",
    "route": "route",
    "status": "status",
    "task": "task",
    "up": "up",
    "completion": "completion",
    "config": "config",
    "doctor": "doctor",
    # pipelines
    "gate": "gate",
    "list": "list",
    "pipeline": "pipeline",
    "resume": "resume",
    "run": "run",
    # epic runs
    "export": "export",
    "go": "go",
    "import": "import_",
    "log": "log",
    "summarize": "summarize",
    "work": "work",
    # messaging between agents
    "inbox": "inbox",
    "mcp": "mcp",
    "msg": "msg",
    "panes": "panes",
    "reply": "reply",
    "send": "send",
    # watching live
    "dash": "dash",
    "notify": "notify",
    "web": "web",
    # task bridge
    "bridge": "bridge",
    # manager mode
    "manager": "manager",
}


class _LazyGroup(click.Group):
    """Imports a command's module only when that command runs (fast ``poli --help``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = _COMMANDS.get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(f"politerm.cli.{module_name}")
        command = getattr(module, "command")  # noqa: B009  # the contract of every cli module
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="poli")
@click.option(
    "--no-color",
    is_flag=True,
    envvar="NO_COLOR",
    help="No colour; every control sequence in agent text is shown escaped.",
)
def cli(no_color: bool) -> None:
    """Run AI coding agents as long-lived TUIs in tmux and drive them unattended."""
    if no_color:
        sanitize.install(no_color=True)


def main(argv: t.Sequence[str] | None = None) -> None:
    """Run ``poli``; every error becomes one line on stderr and a non-zero exit code.

    A :class:`PolitermError` exits 1; a file that cannot be read or written, or text that is
    not UTF-8, exits 1 naming the file; anything unexpected exits 70 with one line (set
    ``POLI_DEBUG=1`` for the traceback). Everything printed goes through
    :class:`~politerm._internal.sanitize.SafeStream`: text an agent wrote never reaches the
    terminal as control sequences.
    """
    args = list(argv) if argv is not None else sys.argv[1:]
    sanitize.install(no_color="--no-color" in args)
    try:
        check_width()
        check_arguments(args)
        rv = cli.main(args=args, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("poli: aborted", err=True)
        sys.exit(130)
    except PolitermError as exc:
        click.echo(f"poli: {exc}", err=True)
        sys.exit(1)
    except (OSError, UnicodeError) as exc:
        if os.environ.get("POLI_DEBUG"):
            raise
        click.echo(f"poli: {describe_os_error(exc)}", err=True)
        sys.exit(1)
    except Exception as exc:  # a traceback is a bug; the user still gets one line
        if os.environ.get("POLI_DEBUG"):
            raise
        click.echo(
            f"poli: internal error: {type(exc).__name__}: {exc} "
            "(set POLI_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        sys.exit(70)
    # With standalone_mode=False click returns ctx.exit()'s code instead of exiting.
    sys.exit(rv if isinstance(rv, int) else 0)
