"""``poli web``: the browser monitor, on 127.0.0.1 with a token, read-only by default."""

from __future__ import annotations

import asyncio
import os
import pathlib

import click

from politerm.cli._common import config_option, load, open_store, project_option


@click.command("web")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free port).")  # fmt: skip
@click.option("--token", envvar="POLI_WEB_TOKEN", help="Use this token instead of a random one.")
@click.option("--allow-actions", is_flag=True,
              help="Serve approve/deny, answer, gate and abort (read-only without).")  # fmt: skip
@project_option
@config_option
def command(
    host: str,
    port: int,
    token: str | None,
    allow_actions: bool,
    config_path: pathlib.Path | None,
) -> None:
    """Serve the web monitor: overview, live agent panes (xterm.js), the event stream.

    Every request needs the token printed at start. Binding beyond 127.0.0.1 with --host is
    refused unless you choose the token (--token or POLI_WEB_TOKEN).
    """
    from politerm.errors import UiError
    from politerm.ui.live import LiveState
    from politerm.ui.notify import Notifier
    from politerm.ui.web import WebMonitor, new_token, serve
    from politerm.ui.web.serve import bind, check_bind, url_of

    check_bind(host, token_given=bool(token))
    if token is not None and len(token) < 16:
        msg = "--token must be at least 16 characters"
        raise UiError(msg)
    config = load(config_path)
    root = config.project.root
    sock = bind(host, port)
    chosen = token or new_token()
    url = url_of(sock, chosen)

    async def main() -> None:
        with open_store(config) as store:
            live = LiveState(config, store, project=root)
            monitor = WebMonitor(live, token=chosen, allow_actions=allow_actions)
            notifier = Notifier(config.notify, store, link=url_of(sock, None, "/"))

            def started() -> None:
                mode = "actions allowed" if allow_actions else "read-only"
                click.echo(f"poli web ({mode}): {url}", err=False)

            async with notifier.running():
                await serve(monitor, sock, started=started)

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main())
