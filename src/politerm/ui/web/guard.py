"""What the web monitor checks besides the token: a request's origin, and a guesser's pace.

Both are pure (the caller passes the headers and the time) so they are tested as tables.
"""

from __future__ import annotations

import collections
import typing as t
import urllib.parse

if t.TYPE_CHECKING:
    from collections.abc import Iterable

# A browser's cross-site request can be a GET with no effect or a POST that must fail here.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_PRUNE_AT = 1024  # clients remembered before the stale ones are swept


def origin_of(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` (the port always written), or None if it has none.

    Examples
    --------
    >>> origin_of("https://Phone.example:8443/agent/A?x=1")
    'https://phone.example:8443'
    >>> origin_of("http://127.0.0.1/"), origin_of("null"), origin_of("https://[::1]:9/")
    ('http://127.0.0.1:80', None, 'https://[::1]:9')
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def same_origin(
    origin: str | None, referer: str | None, allowed: Iterable[str], *, required: bool
) -> bool:
    """Whether a request's ``Origin`` (or, lacking it, ``Referer``) is one of ``allowed``.

    A header that is present must match. When both are absent the answer is ``not required``:
    a remote monitor requires one (every browser sends ``Origin`` with a POST); the loopback
    one accepts a client that sends neither, since it must then send the token as a header,
    which no cross-site page can.

    Examples
    --------
    >>> ok = ["https://127.0.0.2:8443"]
    >>> same_origin("https://127.0.0.2:8443", None, ok, required=True)
    True
    >>> same_origin("https://evil.example", "https://127.0.0.2:8443/", ok, required=True)
    False
    >>> same_origin(None, "https://127.0.0.2:8443/agent/A", ok, required=True)
    True
    >>> same_origin("null", None, ok, required=False), same_origin(None, None, ok, required=True)
    (False, False)
    >>> same_origin(None, None, ok, required=False)
    True
    """
    given = origin if origin is not None else referer
    if given is None:
        return not required
    found = origin_of(given)
    return found is not None and found in {origin_of(a) for a in allowed}


class FailedAttempts:
    """Bad tokens per client: after ``limit`` within ``window`` seconds the client is refused.

    A refused client stays refused until its oldest failure in the window ages out; its
    attempts meanwhile are not counted (they would only lengthen the wait of a user who
    mistyped).

    Examples
    --------
    >>> f = FailedAttempts(limit=2, window=60)
    >>> f.blocked("10.0.0.9", now=0), f.fail("10.0.0.9", now=1), f.fail("10.0.0.9", now=2)
    (False, 1, 2)
    >>> f.blocked("10.0.0.9", now=3), f.blocked("10.0.0.8", now=3)
    (True, False)
    >>> f.blocked("10.0.0.9", now=61.5)
    False
    """

    def __init__(self, *, limit: int = 10, window: float = 300.0) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, collections.deque[float]] = {}

    def _recent(self, client: str, now: float) -> collections.deque[float]:
        seen = self._failures.get(client)
        if seen is None:
            return collections.deque()
        while seen and now - seen[0] >= self.window:
            seen.popleft()
        if not seen:
            del self._failures[client]
        return seen

    def __len__(self) -> int:
        return len(self._failures)

    def blocked(self, client: str, *, now: float) -> bool:
        """Whether ``client`` has used up its failures for now."""
        return len(self._recent(client, now)) >= self.limit

    def retry_after(self, client: str, *, now: float) -> int:
        """Whole seconds until ``client`` may try again (0 if it may now)."""
        seen = self._recent(client, now)
        if len(seen) < self.limit:
            return 0
        return max(1, int(seen[0] + self.window - now + 0.999))

    def fail(self, client: str, *, now: float) -> int:
        """Count a failure of ``client``; returns its failures in the window.

        Examples
        --------
        >>> f = FailedAttempts(limit=3, window=10)
        >>> [f.fail(f"10.0.{i // 256}.{i % 256}", now=0) for i in range(2000)][-1]
        1
        >>> f.fail("10.9.9.9", now=11), len(f)  # the stale ones are dropped, not kept forever
        (1, 1)
        """
        if len(self._failures) >= _PRUNE_AT:
            for stale in list(self._failures):
                self._recent(stale, now)
        self._recent(client, now)
        seen = self._failures.setdefault(client, collections.deque())
        seen.append(now)
        return len(seen)
