"""A private D-Bus session bus with a notification server on it, for the desktop channel.

``poli`` sends desktop notices with the real ``notify-send`` (libnotify). The tests give it a
real ``dbus-daemon --session`` of their own and a small server that owns
``org.freedesktop.Notifications`` and records every ``Notify`` call, so what arrives is
what a desktop's notification daemon would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import typing as t

import pytest
from dbus_fast import Message, MessageType, NameFlag, RequestNameReply, Variant
from dbus_fast.aio import MessageBus

if t.TYPE_CHECKING:
    from collections.abc import AsyncIterator

NAME = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
URGENCY = {0: "low", 1: "normal", 2: "critical"}


class Notification(t.NamedTuple):
    """One ``Notify`` call as the server received it."""

    app_name: str
    summary: str
    body: str
    hints: dict[str, t.Any]
    expire_timeout: int

    @property
    def urgency(self) -> str:
        """The urgency hint by name (the spec's default is normal)."""
        return URGENCY[int(self.hints.get("urgency", 1))]


class NotificationServer:
    """Owns ``org.freedesktop.Notifications`` on a bus and records each notification."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self.received: list[Notification] = []
        self._arrived = asyncio.Event()

    def handle(self, msg: Message) -> Message | None:
        """Answer the spec's methods; ``Notify`` is recorded and gets an id."""
        if msg.message_type is not MessageType.METHOD_CALL or msg.interface != NAME:
            return None
        if msg.member == "Notify":
            app_name, _replaces, _icon, summary, body, _actions, hints, expire = msg.body
            plain = {k: v.value if isinstance(v, Variant) else v for k, v in hints.items()}
            self.received.append(Notification(app_name, summary, body, plain, expire))
            self._arrived.set()
            return Message.new_method_return(msg, "u", [len(self.received)])
        if msg.member == "GetCapabilities":
            return Message.new_method_return(msg, "as", [["body"]])
        if msg.member == "GetServerInformation":
            return Message.new_method_return(msg, "ssss", ["poli-test", "politerm", "1", "1.2"])
        if msg.member == "CloseNotification":
            return Message.new_method_return(msg)
        return Message.new_error(msg, f"{NAME}.Error.Unknown", f"no method {msg.member}")

    async def wait_for(self, n: int, timeout: float = 15) -> list[Notification]:
        """The notifications once ``n`` have arrived (fails after ``timeout`` seconds)."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.received) < n:
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            pytest.fail(f"waited {timeout}s for {n} notifications, got {self.received!r}")
        return self.received


def _need(command: str, package: str) -> str:
    path = shutil.which(command)
    if path is None:
        pytest.fail(f"{command} is missing: install {package} (scripts/_setup.sh does)")
    return path


@contextlib.asynccontextmanager
async def desktop(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NotificationServer]:
    """A session bus of our own with a notification server on it, in our environment.

    ``DBUS_SESSION_BUS_ADDRESS`` points at the bus, so ``notify-send`` run by this process
    or by a ``poli`` it starts talks to the server.
    """
    _need("notify-send", "libnotify-bin")
    daemon = _need("dbus-daemon", "dbus-daemon")
    proc = await asyncio.create_subprocess_exec(
        daemon, "--session", "--nofork", "--print-address=1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
        except TimeoutError:
            line = b""
        address = line.decode().strip()
        if not address:
            err = (await proc.stderr.read()).decode() if proc.returncode is not None else ""
            pytest.fail(f"dbus-daemon --session printed no address within 15s: {err.strip()}")
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
        bus = await MessageBus(bus_address=address).connect()
        try:
            server = NotificationServer(bus)
            bus.add_message_handler(server.handle)
            reply = await bus.request_name(NAME, NameFlag.DO_NOT_QUEUE)
            assert reply is RequestNameReply.PRIMARY_OWNER, f"could not own {NAME}: {reply}"
            yield server
        finally:
            bus.disconnect()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)
