"""``poli attach``: watch (and type into) the agents' panes."""

from __future__ import annotations

import os
import pathlib
import subprocess

import click

from politerm.cli._common import config_option, load, project_option
from politerm.errors import SessionNotFound
from politerm.tmux.binary import find_tmux


@click.command("attach")
@click.option("--read-only", "-r", is_flag=True, help="Attach read-only.")
@config_option
@project_option
def command(read_only: bool, config_path: pathlib.Path | None) -> None:
    """Attach this terminal to the session on the private tmux server."""
    config = load(config_path)
    tmux = find_tmux()
    server, target = [tmux, "-L", config.tmux.socket], f"={config.tmux.session}"
    # Say what is missing and what to run, rather than tmux's bare "no sessions".
    has = subprocess.run(
        [*server, "has-session", "-t", target], capture_output=True, timeout=30, check=False
    )
    if has.returncode != 0:
        msg = (
            f"no session {config.tmux.session!r} on socket {config.tmux.socket!r}: start the "
            "agents with `poli up` (or try it all with `poli demo loop --keep`)"
        )
        raise SessionNotFound(msg)
    args = [*server, "attach-session", "-t", target]
    if read_only:
        args.append("-r")
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    os.execvpe(tmux, args, env)
