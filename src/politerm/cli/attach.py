"""``poli attach``: watch (and type into) the agents' panes."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import typing as t

import click

from politerm.cli._common import config_option, load, project_option
from politerm.driver.observer import Observer
from politerm.driver.panes import attach_argv, attach_env, find
from politerm.errors import SessionNotFound
from politerm.tmux.binary import find_tmux

if t.TYPE_CHECKING:
    from politerm.config import Config


@click.command("attach")
@click.argument("agent", required=False)
@click.option("--read-only", "-r", is_flag=True, help="Attach read-only.")
@config_option
@project_option
def command(agent: str | None, read_only: bool, config_path: pathlib.Path | None) -> None:
    """Attach this terminal to the session on the private tmux server.

    With AGENT, at that agent's window, on whichever of the session's servers it runs.
    """
    config = load(config_path)
    tmux = find_tmux()
    if agent is not None:
        args = [tmux, *asyncio.run(agent_target(config, agent))]
    else:
        server, target = [tmux, "-L", config.tmux.socket], f"={config.tmux.session}"
        # Say what is missing and what to run, rather than tmux's bare "no sessions".
        has = subprocess.run(
            [*server, "has-session", "-t", target], capture_output=True, timeout=30, check=False
        )
        if has.returncode != 0:
            msg = (
                f"no session {config.tmux.session!r} on socket {config.tmux.socket!r}: start "
                "the agents with `poli up` (or try it all with `poli demo loop --keep`)"
            )
            raise SessionNotFound(msg)
        args = [*server, "attach-session", "-t", target]
    if read_only:
        args.append("-r")
    os.execvpe(tmux, args, attach_env())


async def agent_target(config: Config, agent: str) -> list[str]:
    """The tmux arguments that attach to ``agent``'s pane, on the server it runs on.

    Raises
    ------
    SessionNotFound
        The session has no pane of that agent.
    """
    async with Observer.of(config) as observer:
        panes = [p for p in await observer.panes() if p.session == config.tmux.session]
    entry = find(panes, agent)
    if entry is None:
        known = ", ".join(sorted(p.agent for p in panes if p.agent)) or "none"
        msg = f"no agent {agent!r} in session {config.tmux.session!r} (agents: {known})"
        raise SessionNotFound(msg)
    return attach_argv(entry.socket or config.tmux.socket, entry.pane_id)[1:]
