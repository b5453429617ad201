"""``poli attach``: watch (and type into) the agents' panes."""

from __future__ import annotations

import os
import pathlib

import click

from politerm.cli._common import config_option, load, project_option
from politerm.tmux.binary import find_tmux


@click.command("attach")
@click.option("--read-only", "-r", is_flag=True, help="Attach read-only.")
@config_option
@project_option
def command(read_only: bool, config_path: pathlib.Path | None) -> None:
    """Attach this terminal to the session on the private tmux server."""
    config = load(config_path)
    tmux = find_tmux()
    args = [tmux, "-L", config.tmux.socket, "attach-session", "-t", f"={config.tmux.session}"]
    if read_only:
        args.append("-r")
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    os.execvpe(tmux, args, env)
