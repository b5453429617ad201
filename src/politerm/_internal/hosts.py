"""Whether a host name or address is this machine: both servers and clients ask it."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (``localhost``, 127.0.0.0/8, ``::1``).

    Examples
    --------
    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("[::1]")
    (True, True, True)
    >>> is_loopback("0.0.0.0"), is_loopback("redis.example"), is_loopback("127.evil.com")
    (False, False, False)
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
