"""``poli approve``: answer an agent's tool-permission question (approval policy "ask")."""

from __future__ import annotations

import pathlib

import click

from politerm.agents.approval import Decision, answer_pending, find_pending_key
from politerm.cli import _complete
from politerm.cli._common import config_option, load, open_store, project_option
from politerm.engine import service
from politerm.engine.placement import here_config


@click.command("approve")
@click.argument("agent", shell_complete=_complete.agent_names)
@click.option("--deny", is_flag=True, help="Deny instead of approving.")
@config_option
@project_option
def command(agent: str, deny: bool, config_path: pathlib.Path | None) -> None:
    """Approve (or --deny) the question AGENT waits on; its driver presses the keys.

    AGENT is a configured agent, or the key any workflow shows with its question (a
    pipeline step's ``<run id>.step-<n>``, an epic session's ``epic.<session>``).
    """
    config = load(config_path)
    decision = Decision.DENY if deny else Decision.APPROVE
    remote = here_config(config)[1]
    named = next((a for a in remote if a.upper() == agent.upper()), None)
    if named is not None:
        # Its question is asked on the node that runs it: the answer goes there.
        from politerm.engine.fleetboard import approve_remote
        from politerm.engine.fleetlink import open_queue

        with open_store(config) as store:
            said = approve_remote(open_queue(config, store), named, deny=deny, by="cli")
        click.echo(said)
        return
    with open_store(config) as store:
        real = next((a for a in config.agents if a.upper() == agent.upper()), None)
        if real is None:
            real = find_pending_key(store, agent)
        if real is None:
            config.agent(agent)  # an unknown name is an error naming the configured agents
            real = agent
        pending = answer_pending(store, real, decision, by="cli")
    if real in config.agents:
        service.ensure(config, config_path)  # the loop's router presses the keys, now
    click.echo(pending.answered(decision))
