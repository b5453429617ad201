"""Shared bits of the command modules: config and store loading, event printing."""

from __future__ import annotations

import os
import pathlib
import typing as t

import click

from politerm.config import load_config
from politerm.project import PROJECT_ENV
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.store.models import Event

F = t.TypeVar("F", bound=t.Callable[..., t.Any])

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    help="Read this file instead of ./poli.toml.",
)


def _use_config_file(
    ctx: click.Context, param: click.Parameter, value: pathlib.Path | None
) -> None:
    from politerm.config import use_config_file

    if value is not None:
        use_config_file(value)


#: ``--config`` of the commands whose library loads the configuration itself (pipelines):
#: it applies to every load in this process.
process_config_option = click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    callback=_use_config_file,
    expose_value=False,
    is_eager=True,
    help="Read this file instead of the project's poli.toml.",
)


def _select_project(ctx: click.Context, param: click.Parameter, value: pathlib.Path | None) -> None:
    # Through the environment: load_config() finds it, and so do the processes poli starts
    # (the control window's status view).
    if value is not None:
        os.environ[PROJECT_ENV] = str(value.resolve())


project_option = click.option(
    "--project",
    type=click.Path(file_okay=False, exists=True, path_type=pathlib.Path),
    callback=_select_project,
    expose_value=False,
    is_eager=True,
    help="Work for this project directory (default: the one holding poli.toml, else the git "
    "root, else here).",
)

_STYLE = {
    "task": "bold",
    "queued": "dim",
    "delivered": "cyan",
    "block": "green",
    "status": "blue",
    "question": "yellow",
    "nudge": "yellow",
    "retry": "yellow",
    "rejected": "magenta",
    "ignored": "dim",
    "done": "bold green",
    "failed": "bold red",
    "aborted": "bold red",
    "agent-exited": "bold red",
    "dead-letter": "red",
}


VIEW_NICENESS = 10
"""How far a live view (``status --watch``, ``web``, ``dash``) stands back for the router."""


def as_view() -> None:
    """Run this process at a lower CPU priority (:data:`VIEW_NICENESS`), best effort.

    A live view redraws on every commit, work that grows with its rows (500 agents: tens of
    ms a commit); on a busy machine it ran beside the router and the agents and stretched the
    handoffs it was showing. Never raises the priority of a process already lower.
    """
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < VIEW_NICENESS:
            os.setpriority(os.PRIO_PROCESS, 0, VIEW_NICENESS)
    except OSError:
        pass


def load(config_path: pathlib.Path | None) -> Config:
    """The configuration for a command."""
    return load_config(config_path=config_path)


def open_store(config: Config) -> RunStore:
    """The run store the configuration names, redacting with its ``[redact]`` patterns.

    The project's own store unless poli.toml says otherwise. The first time a project opens
    its own store, the global store of older versions is moved to it if it holds this
    project's agents, or named with how to read it.
    """
    from politerm.store.legacy import adopt_legacy_store

    path = config.store.resolved_path()
    if path == config.project.store_path:
        note = adopt_legacy_store(config.project, path)
        if note is not None:
            click.echo(f"poli: {note}", err=True)
    # Secrets this command redacts from the store are kept in the session's tmux server, so
    # that the router (another process) can still deliver the original to the agent.
    return RunStore.for_config(config)


def print_event(event: Event) -> None:
    """Print one event as a styled line."""
    from rich.text import Text

    from politerm.cli._output import show
    from politerm.status import event_line, event_row

    show(Text(event_line(event_row(event)), style=_STYLE.get(event.kind, "")))
