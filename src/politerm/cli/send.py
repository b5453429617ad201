"""``poli send``: queue a request for an agent (or a pane) and optionally wait for the answer."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import config_path_of, load_messaging, messenger, read_text_arg
from politerm.store.mail import Capability


@click.command("send")
@click.argument("text")
@click.option("--to", "to", required=True, help="Agent name or tmux pane id (%N).")
@click.option(
    "--capability",
    type=click.Choice([c.value for c in Capability]),
    default=Capability.WRITABLE.value,
    show_default=True,
    help="readonly denies the receiver's write approvals for that turn.",
)
@click.option("--wait", is_flag=True, help="Block until the response and print it.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="With --wait.")
@click.option("--id", "msg_id", help="Message id (a retried send with the same id is one send).")
@click.option("--no-postman", is_flag=True, help="Do not start the service that delivers.")
@config_option
def command(
    text: str,
    to: str,
    capability: str,
    wait: bool,
    timeout: float,
    msg_id: str | None,
    no_postman: bool,
    config_path: pathlib.Path | None,
) -> None:
    """Send TEXT (or - for standard input) to an agent; print the message id."""
    config = load_messaging(config_path)
    with messenger(config) as m:
        mail = m.send(read_text_arg(text), to=to, capability=Capability(capability), msg_id=msg_id)
        click.echo(mail.id)
        if not no_postman:
            m.ensure_delivery(config_path_of(config_path))
        if wait:
            done = asyncio.run(m.wait_final(mail.id, timeout))
            click.echo(m.response_text(done), nl=False)
