"""``poli reply``: answer a request from inside an agent's pane."""

from __future__ import annotations

import pathlib

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import config_path_of, load_messaging, messenger, read_text_arg


@click.command("reply")
@click.argument("response")
@click.option("--to", "to", help="The request's message id (default: the oldest delivered one).")
@click.option("--no-postman", is_flag=True, help="Do not start the service that delivers.")
@config_option
def command(
    response: str, to: str | None, no_postman: bool, config_path: pathlib.Path | None
) -> None:
    """Answer with RESPONSE: text, a FILE, or - for standard input; the sender is notified."""
    config = load_messaging(config_path)
    with messenger(config) as m:
        path = pathlib.Path(response) if response != "-" else None
        if path is not None and path.is_file():
            mail = m.reply(to=to, path=path)
        else:
            mail = m.reply(read_text_arg(response), to=to)
        click.echo(f"{mail.id} responded: {mail.response_path}")
        if not no_postman:
            m.ensure_delivery(config_path_of(config_path))
