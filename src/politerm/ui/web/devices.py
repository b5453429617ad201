"""The devices allowed to open ``poli web --remote``: one token each, kept only as a hash.

``<user state>/web/devices.json`` (0600 in a 0700 folder) maps a device name to the SHA-256
of its token and when it was added. The token itself is shown once, when the device is
added, and never written anywhere. A running server reads the file again whenever it
changes, so ``poli web devices revoke NAME`` shuts a device out at its next request.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import re
import secrets
import time

import platformdirs

from politerm._internal.private import write_private
from politerm.errors import UiError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


@dataclasses.dataclass(frozen=True)
class Device:
    """A paired device: its name, its token's hash and when it was added."""

    name: str
    token_hash: str
    added: float


def devices_path() -> pathlib.Path:
    """The device file (``<user state>/web/devices.json``)."""
    return platformdirs.user_state_path("politerm") / "web" / "devices.json"


def hash_token(token: str) -> str:
    """What is kept of a token: its SHA-256 (the token is 32 random bytes; no salt needed).

    Examples
    --------
    >>> hash_token("abc")[:16]
    'ba7816bf8f01cfea'
    """
    return hashlib.sha256(token.encode()).hexdigest()


class Devices:
    """The device file: list, add, revoke, and which device a token belongs to.

    Parameters
    ----------
    path
        The file (default :func:`devices_path`).
    """

    def __init__(self, path: pathlib.Path | None = None) -> None:
        self.path = path or devices_path()
        self._seen: tuple[int, int, int] | None = None
        self._by_hash: dict[str, Device] = {}

    def list(self) -> list[Device]:
        """The paired devices, oldest first."""
        return sorted(self._read().values(), key=lambda d: d.added)

    def add(self, name: str) -> str:
        """Pair a new device ``name``; returns its token (shown once, never stored).

        Raises
        ------
        UiError
            The name is not a short word, or a device of that name exists.
        """
        if not _NAME.match(name):
            msg = f"device name {name!r}: use 1-40 letters, digits, '.', '_' or '-'"
            raise UiError(msg)
        devices = self._read()
        if name in devices:
            msg = f"device {name!r} is already paired (revoke it first to pair it again)"
            raise UiError(msg)
        token = secrets.token_urlsafe(32)
        devices[name] = Device(name, hash_token(token), time.time())
        self._write(devices)
        return token

    def revoke(self, name: str) -> None:
        """Forget device ``name``: its token opens nothing from now on.

        Raises
        ------
        UiError
            No device has that name.
        """
        devices = self._read()
        if devices.pop(name, None) is None:
            known = ", ".join(sorted(devices)) or "none"
            msg = f"no device named {name!r} (paired: {known})"
            raise UiError(msg)
        self._write(devices)

    def check(self, token: str) -> str | None:
        """The name of the device ``token`` belongs to, or None."""
        self._refresh()
        given = hash_token(token)
        for known, device in self._by_hash.items():
            if secrets.compare_digest(known, given):
                return device.name
        return None

    # --- the file -------------------------------------------------------------------------

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            # A write replaces the file (a new inode), so a change shows even within one tick.
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            seen = None
        if seen != self._seen or seen is None:
            self._by_hash = {d.token_hash: d for d in self._read().values()}
            self._seen = seen

    def _read(self) -> dict[str, Device]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            msg = f"{self.path}: cannot read the paired devices ({exc})"
            raise UiError(msg) from None
        try:
            return {
                name: Device(name, str(d["sha256"]), float(d["added"]))
                for name, d in raw["devices"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            msg = f"{self.path}: not a devices file (expected {{'devices': {{name: ...}}}})"
            raise UiError(msg) from None

    def _write(self, devices: dict[str, Device]) -> None:
        kept = {d.name: {"sha256": d.token_hash, "added": d.added} for d in devices.values()}
        data = {"devices": kept}
        write_private(self.path, json.dumps(data, indent=2) + "\n")
        self._seen = None
