"""The connection to the fleet's Redis: checked URL, TLS, bounded commands, one-line errors.

:func:`connect` refuses, before any packet is sent, a URL that carries no password unless
its host is loopback (another machine must authenticate), and a URL with query parameters
(they could switch TLS verification off behind the configuration's back). ``rediss://``
verifies the server's certificate and host name, against ``ca_file`` when given. Every
command is bounded by ``timeout`` and never retried behind the caller's back: a retried
Lua script may run twice, so the caller (a node's loop) decides. :meth:`Connection.talking`
turns redis-py's errors into the :class:`~politerm.errors.FleetError` tree, with the URL's
password replaced by ``***`` in every message.
"""

from __future__ import annotations

import contextlib
import os
import typing as t
import urllib.parse

from politerm._internal.hosts import is_loopback
from politerm.config.fleet import redact_url
from politerm.errors import FleetAuthError, FleetError, FleetRefused, FleetUnavailable

try:  # redis-py is the [fleet] extra: a plain install without it says what to install
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import AuthorizationError, NoPermissionError
    from redis.retry import Retry
except ImportError as exc:
    _missing = "a fleet needs redis-py: pip install 'politerm[fleet]'"
    raise FleetError(_missing) from exc

if t.TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    from politerm.config.fleet import FleetConfig

__all__ = ["Connection", "connect", "connect_config"]

_AUTH_WORDS = ("NOAUTH", "WRONGPASS", "NOPERM", "invalid username-password", "AUTH failed")


class Connection:
    """A redis-py client and where it points (shown redacted), with error translation.

    Build it with :func:`connect` or :func:`connect_config`.
    """

    def __init__(self, client: redis.Redis, where: str, timeout: float, secret: str) -> None:
        self.client = client
        """The redis-py client (str in and out, no retries, every command bounded)."""
        self.where = where
        """The URL with its password replaced by ``***``."""
        self.timeout = timeout
        """The longest any one command may take, in seconds."""
        self._secret = secret

    def __repr__(self) -> str:
        return f"Connection({self.where!r})"

    @property
    def cmd(self) -> t.Any:
        """:attr:`client`, untyped for its replies.

        redis-py types every reply as a union of bytes, str and awaitables; with
        ``decode_responses=True`` they are str, lists and dicts, which the callers check.
        """
        return self.client

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    @contextlib.contextmanager
    def talking(self, what: str) -> Iterator[None]:
        """Run Redis commands for ``what`` (words for the messages); translate their errors.

        Raises
        ------
        FleetAuthError
            Redis refused the user, the password, or a command by its ACL.
        FleetUnavailable
            Redis could not be reached, or did not answer within :attr:`timeout`.
        FleetError
            Redis answered with another error (out of memory, a read-only replica…).
        """
        try:
            yield
        except redis.TimeoutError:
            msg = f"Redis at {self.where} did not answer within {self.timeout:g} s ({what})"
            raise FleetUnavailable(msg) from None
        except (redis.AuthenticationError, AuthorizationError, NoPermissionError) as exc:
            msg = f"Redis at {self.where} refused us ({what}): {self._scrub(str(exc))}"
            raise FleetAuthError(msg) from None
        except redis.ConnectionError as exc:
            detail = self._scrub(str(exc)) or type(exc).__name__
            msg = f"cannot reach Redis at {self.where} ({what}): {detail}"
            raise FleetUnavailable(msg) from None
        except redis.ResponseError as exc:
            text = self._scrub(str(exc))
            if any(word.lower() in text.lower() for word in _AUTH_WORDS):
                msg = f"Redis at {self.where} refused us ({what}): {text}"
                raise FleetAuthError(msg) from None
            # Out of memory, a read-only replica, a busy script…: Redis's own words.
            msg = f"Redis at {self.where} answered an error ({what}): {text}"
            raise FleetError(msg) from None
        except redis.RedisError as exc:
            # An answer that is no Redis protocol (an HTTP server on that port…): unusable.
            detail = self._scrub(str(exc)) or type(exc).__name__
            msg = f"cannot use Redis at {self.where} ({what}): {detail}"
            raise FleetUnavailable(msg) from None

    def ping(self) -> None:
        """Check that Redis answers and accepts us (one PING)."""
        with self.talking("checking the connection"):
            self.client.ping()

    def close(self) -> None:
        """Close every connection of the client's pool."""
        self.client.close()


def connect(
    url: str,
    *,
    password: str | None = None,
    ca_file: Path | None = None,
    timeout: float = 5.0,
    name: str = "poli",
) -> Connection:
    """A :class:`Connection` to ``url`` (no command is sent yet; :meth:`Connection.ping`).

    Parameters
    ----------
    url
        ``redis://[user[:password]@]host[:port][/db]`` or ``rediss://…`` (TLS).
    password
        Used when the URL carries none (e.g. from ``[fleet] password_env``).
    ca_file
        A PEM file of the certificate authorities that may sign a ``rediss://`` server.
    timeout
        Seconds any one command (and connecting) may take.
    name
        The client name Redis shows (``CLIENT LIST``).

    Raises
    ------
    FleetRefused
        The URL is not one politerm connects to (the message says why, never the password).
    """
    shown = redact_url(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 6379
        db = int(parts.path.strip("/") or 0)
    except ValueError:
        msg = f"{shown}: not a redis:// URL with a host, a port and a database number"
        raise FleetRefused(msg) from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        msg = f"{shown}: expected redis://host or rediss://host"
        raise FleetRefused(msg)
    if parts.query or parts.fragment:
        msg = f"{shown}: query parameters are not accepted (TLS options go in [fleet])"
        raise FleetRefused(msg)
    user = urllib.parse.unquote(parts.username) if parts.username else None
    secret = urllib.parse.unquote(parts.password) if parts.password else (password or "")
    if not secret and not is_loopback(parts.hostname):
        msg = (
            f"{shown}: refused: Redis on another machine needs an ACL user and password "
            "(in the URL or [fleet] password_env); only a loopback Redis may go without"
        )
        raise FleetRefused(msg)
    tls = parts.scheme == "rediss"
    if ca_file is not None and not tls:
        msg = f"{shown}: ca_file is given, but the URL is redis:// (plain): use rediss://"
        raise FleetRefused(msg)
    if ca_file is not None and not ca_file.is_file():
        msg = f"[fleet] ca_file: {ca_file}: no such file"
        raise FleetRefused(msg)
    tls_options: dict[str, t.Any] = {}
    if tls:
        tls_options = {
            "ssl": True,
            "ssl_cert_reqs": "required",
            "ssl_check_hostname": True,
            "ssl_ca_certs": str(ca_file) if ca_file is not None else None,
        }
    client = redis.Redis(
        host=parts.hostname,
        port=port,
        db=db,
        username=user,
        password=secret or None,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        client_name=name,
        decode_responses=True,
        **tls_options,
    )
    if secret and parts.password is None:
        netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
        shown = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return Connection(client, shown, timeout, secret)


def connect_config(config: FleetConfig, env: Mapping[str, str] | None = None) -> Connection:
    """:func:`connect` with ``[fleet]``'s URL, password variable, CA file and timeout."""
    env = os.environ if env is None else env
    return connect(
        config.url,
        password=env.get(config.password_env) or None,
        ca_file=config.ca_file,
        timeout=config.timeout,
        name=f"poli-{config.node}",
    )
