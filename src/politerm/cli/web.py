"""``poli web``: the browser monitor, on 127.0.0.1 with a token, read-only by default.

``--remote`` serves it beyond this machine over TLS to paired devices only;
``poli web devices`` lists, pairs and revokes them.
"""

from __future__ import annotations

import asyncio
import os
import pathlib

import click

from politerm.cli._common import as_view, config_option, load, open_store, project_option

_FILE = click.Path(dir_okay=False, exists=True, path_type=pathlib.Path)


@click.group("web", invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free port).")  # fmt: skip
@click.option("--token", envvar="POLI_WEB_TOKEN", help="Use this token instead of a random one.")
@click.option("--allow-actions", is_flag=True,
              help="Serve approve/deny, answer, gate and abort (read-only without).")  # fmt: skip
@click.option("--remote", is_flag=True,
              help="Serve beyond this machine: TLS only, paired devices only.")  # fmt: skip
@click.option("--hostname", help="With --remote: the name or address the phone uses "
              "(default: --host); it goes in the URL and the certificate.")  # fmt: skip
@click.option("--cert", type=_FILE, help="With --remote: your certificate (PEM).")
@click.option("--key", type=_FILE, help="With --remote: its private key (PEM, unencrypted).")
@click.option("--device", help="With --remote: pair a new device of this name and show its "
              "URL and QR code (default: 'phone' when none is paired).")  # fmt: skip
@project_option
@config_option
@click.pass_context
def command(
    ctx: click.Context,
    host: str,
    port: int,
    token: str | None,
    allow_actions: bool,
    remote: bool,
    hostname: str | None,
    cert: pathlib.Path | None,
    key: pathlib.Path | None,
    device: str | None,
    config_path: pathlib.Path | None,
) -> None:
    """Serve the web monitor: overview, live agent panes (xterm.js), the event stream.

    Every request needs the token printed at start, and it listens on 127.0.0.1 only.
    With --remote it listens on --host over TLS (your --cert/--key, or a self-signed
    certificate whose SHA-256 it prints) and admits only paired devices, each with its own
    token (`poli web devices`); a new device's URL is printed with a QR code to scan.
    """
    if ctx.invoked_subcommand is not None:
        return
    from politerm.errors import UiError
    from politerm.ui.web.serve import check_bind

    check_bind(host, remote=remote)
    if remote:
        if ctx.get_parameter_source("token") is click.core.ParameterSource.COMMANDLINE:
            msg = "--token is for the loopback monitor; --remote admits paired devices only"
            raise UiError(msg)
        _serve_remote(host, port, allow_actions, hostname, cert, key, device, config_path)
        return
    for given, name in ((hostname, "--hostname"), (cert, "--cert"), (key, "--key"),
                        (device, "--device")):  # fmt: skip
        if given is not None:
            msg = f"{name} goes with --remote"
            raise UiError(msg)
    if token is not None and len(token) < 16:
        msg = "--token must be at least 16 characters"
        raise UiError(msg)
    _serve_local(host, port, token, allow_actions, config_path)


def _serve_local(
    host: str, port: int, token: str | None, allow_actions: bool, config_path: pathlib.Path | None
) -> None:
    from politerm.ui.live import LiveState
    from politerm.ui.notify import Notifier
    from politerm.ui.projects import shown_with
    from politerm.ui.web import WebMonitor, new_token, serve
    from politerm.ui.web.serve import bind, url_of

    config = load(config_path)
    root = config.project.root
    sock = bind(host, port)
    chosen = token or new_token()
    url = url_of(sock, chosen)
    origins = [url_of(sock, None, "")]
    if host == "127.0.0.1":
        origins.append(url_of(sock, None, "", hostname="localhost"))

    async def main() -> None:
        with open_store(config) as store:
            live = LiveState(config, store, project=root, others=shown_with(config))
            monitor = WebMonitor(live, token=chosen, allow_actions=allow_actions, origins=origins)
            notifier = Notifier(config.notify, store, link=url_of(sock, None, "/"))

            def started() -> None:
                mode = "actions allowed" if allow_actions else "read-only"
                click.echo(f"poli web ({mode}): {url}", err=False)

            async with notifier.running():
                await serve(monitor, sock, started=started)

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    as_view()
    asyncio.run(main())


def _serve_remote(
    host: str,
    port: int,
    allow_actions: bool,
    hostname: str | None,
    cert: pathlib.Path | None,
    key: pathlib.Path | None,
    device: str | None,
    config_path: pathlib.Path | None,
) -> None:
    from politerm.ui.live import LiveState
    from politerm.ui.notify import Notifier
    from politerm.ui.projects import shown_with
    from politerm.ui.web import WebMonitor, serve
    from politerm.ui.web.devices import Devices
    from politerm.ui.web.remote import (
        certificate_for,
        certificate_names,
        pair_at_start,
        pairing_text,
        pairing_url,
        public_name,
        remember_origin,
    )
    from politerm.ui.web.serve import bind, url_of

    config = load(config_path)
    root = config.project.root
    name = public_name(host, hostname)
    certificate = certificate_for(certificate_names(host, name), cert, key)
    devices = Devices()
    sock = bind(host, port)
    origin = url_of(sock, None, "", scheme="https", hostname=name)
    origins = [origin, url_of(sock, None, "", scheme="https")]
    pairing = pair_at_start(devices, device)
    remember_origin(origin)

    async def main() -> None:
        with open_store(config) as store:
            live = LiveState(config, store, project=root, others=shown_with(config))
            monitor = WebMonitor(
                live,
                token=None,
                allow_actions=allow_actions,
                devices=devices,
                origins=origins,
                remote=True,
            )
            # The link in a notification opens the page; the phone's cookie brings the token.
            notifier = Notifier(config.notify, store, link=origin + "/")

            def started() -> None:
                mode = "actions allowed" if allow_actions else "read-only"
                made = " (self-signed, made here)" if certificate.generated else ""
                click.echo(f"poli web (remote, {mode}): {origin}/")
                click.echo(f"TLS certificate {certificate.cert}{made}")
                click.echo(f"  SHA-256 {certificate.fingerprint}")
                if pairing is not None:
                    url = pairing_url(origin, pairing.token)
                    click.echo(pairing_text(pairing.name, url))
                    click.echo(
                        "Scan the code or open the URL on that device; check that its browser "
                        "shows the SHA-256 above. The token is not shown again."
                    )
                else:
                    paired = ", ".join(d.name for d in devices.list())
                    click.echo(f"paired devices: {paired} (pair another: --device NAME)")
                click.echo("Ctrl-C stops it.")

            async with notifier.running():
                await serve(monitor, sock, started=started, certificate=certificate)

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    as_view()
    asyncio.run(main())


@command.group("devices", invoke_without_command=True)
@click.pass_context
def devices_command(ctx: click.Context) -> None:
    """The devices `poli web --remote` admits (without a subcommand: list them)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_command)


@devices_command.command("list")
def list_command() -> None:
    """List the paired devices."""
    import datetime

    from politerm.ui.web.devices import Devices

    found = Devices().list()
    if not found:
        click.echo("no devices paired (`poli web devices add NAME`, or `poli web --remote`)")
    for d in found:
        added = datetime.datetime.fromtimestamp(d.added).strftime("%Y-%m-%d %H:%M")
        click.echo(f"{d.name}\tadded {added}")


@devices_command.command("add")
@click.argument("name")
@click.option("--url", "base", help="The address the device opens, e.g. https://box.lan:8443 "
              "(default: that of the last `poli web --remote`).")  # fmt: skip
def add_command(name: str, base: str | None) -> None:
    """Pair device NAME: print its token (once), and its URL and QR code."""
    from politerm.errors import UiError
    from politerm.ui.web.devices import Devices
    from politerm.ui.web.guard import origin_of
    from politerm.ui.web.remote import last_origin, pairing_text, pairing_url

    origin = None
    if base is not None:
        origin = origin_of(base)
        if origin is None or not base.startswith("https://"):
            msg = f"--url {base!r}: give the https:// address the device opens"
            raise UiError(msg)
    origin = origin or last_origin()
    token = Devices().add(name)
    if origin is None:
        click.echo(f"device {name}: token {token}")
        click.echo("(open https://HOST:PORT/?token=TOKEN on it once `poli web --remote` runs)")
    else:
        click.echo(pairing_text(name, pairing_url(origin, token)))
    click.echo("The token is not shown again.")


@devices_command.command("revoke")
@click.argument("name")
def revoke_command(name: str) -> None:
    """Revoke device NAME: its token opens nothing from its next request on."""
    from politerm.ui.web.devices import Devices

    Devices().revoke(name)
    click.echo(f"revoked {name}")
