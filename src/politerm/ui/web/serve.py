"""Run the web monitor with uvicorn on a socket we bind ourselves (so port 0 works)."""

from __future__ import annotations

import asyncio
import socket
import types
import typing as t

import uvicorn

from politerm._internal.hosts import is_loopback
from politerm.errors import UiError

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.ui.web.app import WebMonitor
    from politerm.ui.web.tls import Certificate


def check_bind(host: str, *, remote: bool) -> None:
    """Refuse to listen beyond this machine without TLS and device tokens (``--remote``).

    Raises
    ------
    UiError
        ``host`` is not a loopback address and ``remote`` is false.
    """
    if not is_loopback(host) and not remote:
        msg = (
            f"--host {host} listens beyond this machine: use --remote, which serves only over "
            "TLS and only to paired devices"
        )
        raise UiError(msg)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0 picks a free one).

    Raises
    ------
    UiError
        The address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = f"cannot listen on {host}:{port}: {why}"
        raise UiError(msg) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def url_of(
    sock: socket.socket,
    token: str | None,
    path: str = "/",
    *,
    scheme: str = "http",
    hostname: str | None = None,
) -> str:
    """The address to open, with the token when given (never in a notification's link).

    ``hostname`` replaces the bound address (the name a phone uses to reach this machine).
    """
    host, port = sock.getsockname()[:2]
    host = hostname or host
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}{path}" + (f"?token={token}" if token else "")


class _Server(uvicorn.Server):
    """uvicorn's server, told when to stop instead of checking ten times a second.

    uvicorn's own main loop wakes every 0.1 s to refresh the ``Date`` header and look at
    ``should_exit``; an idle monitor should not. The header is off and the loop waits for
    an event that :meth:`stop` and the signal handler set.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()
        self.exit = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        self.ready.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)  # the default headers, once
        await self.exit.wait()

    def stop(self) -> None:
        self.should_exit = True
        self.exit.set()

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.exit.set)


async def serve(
    monitor: WebMonitor,
    sock: socket.socket,
    *,
    started: Callable[[], None] | None = None,
    stop: asyncio.Event | None = None,
    certificate: Certificate | None = None,
) -> None:
    """Serve ``monitor.app`` on ``sock`` until ``stop`` is set (or the task is cancelled).

    With ``certificate`` the socket speaks TLS only.
    """
    config = uvicorn.Config(
        monitor.app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        ws_ping_interval=None,
        date_header=False,
        ssl_certfile=str(certificate.cert) if certificate else None,
        ssl_keyfile=str(certificate.key) if certificate else None,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({task, ready}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            await task
            return
        if not server.ready.is_set():
            msg = "the web server did not start listening within 30s"
            raise UiError(msg)
        if started is not None:
            started()
        if stop is None:
            await task
        else:
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
    finally:
        server.stop()
        await asyncio.wait_for(asyncio.shield(task), 10)
