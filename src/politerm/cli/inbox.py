"""``poli inbox``: the messages of an agent (or of everyone), with their states."""

from __future__ import annotations

import pathlib

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import echo_json, load_messaging, mail_line, messenger
from politerm.messaging.service import USER


@click.command("inbox")
@click.argument("agent", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def command(agent: str | None, as_json: bool, config_path: pathlib.Path | None) -> None:
    """Show AGENT's inbox (default: this pane's agent, or every message)."""
    config = load_messaging(config_path)
    with messenger(config) as m:
        who = agent or m.identity().agent
        mails = m.mailbox.select() if who == USER and agent is None else m.mailbox.inbox(who)
        if as_json:
            echo_json([mail.to_json() for mail in mails])
            return
        if not mails:
            hint = "`poli msg list` shows every message" if agent else "none between agents yet"
            click.echo(f'no messages for {who}; {hint} (send one: `poli send --to AGENT "…"`)')
        for mail in mails:
            click.echo(mail_line(mail))
