"""``poli approve``: answer an agent's tool-permission question (approval policy "ask")."""

from __future__ import annotations

import pathlib

import click

from politerm.agents.approval import Decision, answer_pending
from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, project_option


@click.command("approve")
@click.argument("agent", shell_complete=_complete.agent_names)
@click.option("--deny", is_flag=True, help="Deny instead of approving.")
@config_option
@project_option
def command(agent: str, deny: bool, config_path: pathlib.Path | None) -> None:
    """Approve (or --deny) the question AGENT waits on; the router presses the keys."""
    config = load(config_path)
    real = next((a for a in config.agents if a.upper() == agent.upper()), agent)
    config.agent(real)  # an unknown agent is an error naming the configured ones
    decision = Decision.DENY if deny else Decision.APPROVE
    with open_store(config) as store:
        pending = answer_pending(store, real, decision)
    done = "denied" if deny else "approved"
    click.echo(f"{done}: {real} may{' not' if deny else ''} run {pending.what}")
