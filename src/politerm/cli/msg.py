"""``poli msg``: show one message, list messages by state (the project's service delivers)."""

from __future__ import annotations

import pathlib

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import echo_json, load_messaging, mail_line, messenger
from politerm.store.mail import MailState


@click.group("msg")
def command() -> None:
    """Messages between agents."""


@command.command("show")
@click.argument("msg_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def show(msg_id: str, as_json: bool, config_path: pathlib.Path | None) -> None:
    """Show message MSG_ID: its state, reason, request and response."""
    config = load_messaging(config_path)
    with messenger(config) as m:
        mail = m.mailbox.require(msg_id)
        request = m.request_text(mail)
        response = m.response_text(mail) if mail.response_path else None
        if as_json:
            echo_json({**mail.to_json(), "request": request, "response": response})
            return
        click.echo(mail_line(mail))
        click.echo(f"reason: {mail.reason or '-'}   attempts: {mail.attempts}/{mail.max_attempts}")
        click.echo(f"--- request ({mail.body_path})\n{request}")
        if response is not None:
            click.echo(f"--- response ({mail.response_path})\n{response}")


@command.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in MailState]),
    help="Only these states (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def list_(states: tuple[str, ...], as_json: bool, config_path: pathlib.Path | None) -> None:
    """List messages, oldest first."""
    config = load_messaging(config_path)
    with messenger(config) as m:
        mails = m.mailbox.select(states=[MailState(s) for s in states])
        if as_json:
            echo_json([mail.to_json() for mail in mails])
            return
        if not mails:
            which = f" in state {'/'.join(states)}" if states else ""
            click.echo(f'no messages{which}; an agent sends one with `poli send --to AGENT "…"`')
        for mail in mails:
            click.echo(mail_line(mail))
