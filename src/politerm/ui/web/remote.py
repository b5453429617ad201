"""``poli web --remote``: what to serve beyond this machine, and what to tell the person.

The address the phone uses (``--hostname``, else the bound address) names the certificate,
the origin every changing request must come from, the links in notifications, and the
pairing URL printed with its QR code. The last remote origin is kept so that
``poli web devices add`` can print a URL too.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import typing as t

import platformdirs

from politerm._internal.private import write_private
from politerm.errors import UiError
from politerm.ui.web.guard import origin_of
from politerm.ui.web.qr import qr_text

if t.TYPE_CHECKING:
    from politerm.ui.web.devices import Devices
    from politerm.ui.web.tls import Certificate

DEFAULT_DEVICE = "phone"
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # every address: no use in a URL


@dataclasses.dataclass(frozen=True)
class Pairing:
    """A device paired at start: its name and its token (shown once)."""

    name: str
    token: str


def remote_origin_path() -> pathlib.Path:
    """Where the last ``--remote`` origin is kept (for ``poli web devices add``)."""
    return platformdirs.user_state_path("politerm") / "web" / "remote.json"


def public_name(host: str, hostname: str | None) -> str:
    """The name a phone uses: ``hostname``, else ``host`` unless it is a wildcard address.

    Raises
    ------
    UiError
        ``host`` listens on every address and no ``hostname`` says which one the phone uses.

    Examples
    --------
    >>> public_name("127.0.0.2", None), public_name("0.0.0.0", "box.lan")
    ('127.0.0.2', 'box.lan')
    """
    if hostname:
        return hostname
    if host in _WILDCARDS:
        msg = (
            f"--host {host} listens on every address: give --hostname, the name or address "
            "the phone uses"
        )
        raise UiError(msg)
    return host


def certificate_names(host: str, name: str) -> list[str]:
    """The names a made certificate carries: the phone's, and the bound address if specific.

    Examples
    --------
    >>> certificate_names("0.0.0.0", "box.lan"), certificate_names("127.0.0.2", "box.lan")
    (['box.lan'], ['box.lan', '127.0.0.2'])
    """
    return [name] if name == host or host in _WILDCARDS else [name, host]


def certificate_for(
    names: t.Sequence[str], cert: pathlib.Path | None, key: pathlib.Path | None
) -> Certificate:
    """The user's certificate (both ``cert`` and ``key``), else the kept or a new self-signed one.

    Raises
    ------
    UiError
        Only one of ``cert`` and ``key`` was given, or they do not load.
    """
    from politerm.ui.web.tls import self_signed, user_certificate

    if (cert is None) != (key is None):
        msg = "--cert and --key go together: give both, or neither for a self-signed certificate"
        raise UiError(msg)
    if cert is not None and key is not None:
        return user_certificate(cert, key)
    return self_signed(names)


def pair_at_start(devices: Devices, device: str | None) -> Pairing | None:
    """Pair ``device`` now; with no name, pair ``phone`` if no device is paired yet."""
    if device is None:
        if devices.list():
            return None
        device = DEFAULT_DEVICE
    return Pairing(device, devices.add(device))


def remember_origin(origin: str) -> None:
    """Keep ``origin`` for ``poli web devices add``."""
    write_private(remote_origin_path(), json.dumps({"origin": origin}) + "\n")


def last_origin() -> str | None:
    """The origin of the last ``poli web --remote``, if one ran."""
    try:
        found = json.loads(remote_origin_path().read_text(encoding="utf-8")).get("origin")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and origin_of(found) else None


def pairing_url(origin: str, token: str) -> str:
    """The address that pairs a browser: the origin with the token (moved to a cookie at once).

    Examples
    --------
    >>> pairing_url("https://127.0.0.2:8443", "tok")
    'https://127.0.0.2:8443/?token=tok'
    """
    return f"{origin}/?token={token}"


def pairing_text(name: str, url: str) -> str:
    """What the terminal shows for a device: its URL, then the QR code of that URL."""
    return f"device {name}: {url}\n{qr_text(url)}"
