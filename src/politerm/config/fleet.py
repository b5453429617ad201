"""The ``[fleet]`` table of ``poli.toml``: one project's agents on several machines.

Without ``[fleet]`` nothing changes (one machine, SQLite). With it, the nodes share a work
queue in Redis (:mod:`politerm.fleet`). The table is usually split: the shared part (``url``,
``lease``, the budget) in the project's poli.toml, ``node`` in each machine's user file or
``POLI_FLEET_NODE``.

It imports nothing but pydantic and the standard library, because :mod:`politerm.config`
loads it for every command.
"""

from __future__ import annotations

import re
import socket
import typing as t
import urllib.parse
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

_SECONDS = "a number of seconds > 0"
NAME_PATTERN: t.Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""A node or fleet project name: letters, digits, ``_ . -``; what Redis keys carry."""

_NAME_RE = re.compile(NAME_PATTERN)
_URL_RE = re.compile(r"^rediss?://\S+$")


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: what messages may show.

    Examples
    --------
    >>> redact_url("redis://poli:s3cret@10.0.0.5:6379/0")
    'redis://poli:***@10.0.0.5:6379/0'
    >>> redact_url("rediss://:s3cret@cache.example")
    'rediss://:***@cache.example'
    >>> redact_url("redis://127.0.0.1:6379")
    'redis://127.0.0.1:6379'
    >>> redact_url("redis://poli:s3cret@[::1")
    'redis://***@[::1'
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        # Unparseable (a bad IPv6 bracket): whatever stands before the last '@' may hold the
        # password, so all of it goes. The error that quotes this URL must not fail itself.
        scheme, sep, rest = url.partition("://")
        if "@" not in rest:
            return url
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def default_node() -> str:
    """The short host name of this machine made into a node name (``node`` when it has none)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname().split(".")[0]).strip("-.")
    return name[:63] if name and _NAME_RE.match(name) else "node"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FleetBudgetConfig(_Section):
    """Fleet-wide caps per UTC day, enforced by every node before it starts a turn.

    Cost is in whatever unit the nodes report (USD for the model APIs); tokens are input
    plus output tokens as :class:`politerm.protocol.usage.Usage` counts them.
    """

    tokens_per_day: int | None = Field(
        default=None, gt=0, description="a whole number > 0 (the project's tokens per day)"
    )
    cost_per_day: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="a number > 0 (the project's)"
    )
    agent_tokens_per_day: int | None = Field(
        default=None, gt=0, description="a whole number > 0 (each agent's tokens per day)"
    )
    agent_cost_per_day: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="a number > 0 (each agent's)"
    )


class FleetConfig(_Section):
    """``[fleet]``: the Redis the nodes share, this machine's node name, the lease."""

    url: str = Field(
        pattern=_URL_RE.pattern,
        description="a redis:// or rediss:// URL (with an ACL user unless on loopback)",
    )
    password_env: str = Field(
        default="POLI_FLEET_PASSWORD",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the name of an environment variable holding the password (if not in url)",
    )
    ca_file: Path | None = Field(
        default=None, description="a CA certificate file (PEM) to verify a rediss:// server"
    )
    node: str = Field(
        default_factory=default_node,
        pattern=NAME_PATTERN,
        description="this machine's node name (letters, digits, '_', '.', '-')",
    )
    project: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="the fleet's name for this project (default: the project directory's name)",
    )
    lease: float = Field(
        default=30.0, ge=1, le=86400, allow_inf_nan=False, description="seconds from 1 to 86400"
    )
    margin: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds >= 0, less than lease (the lease a node needs left to type)",
    )
    max_attempts: int = Field(default=3, ge=1, le=100, description="a whole number 1..100")
    timeout: float = Field(
        default=5.0, gt=0, le=300, allow_inf_nan=False, description="seconds > 0 (per command)"
    )
    heartbeat: float = Field(default=5.0, gt=0, le=3600, allow_inf_nan=False, description=_SECONDS)
    keep: float = Field(
        default=7 * 86400.0,
        ge=60,
        allow_inf_nan=False,
        description="seconds >= 60 (how long finished work is kept, and so deduplicated)",
    )
    budget: FleetBudgetConfig = Field(default_factory=FleetBudgetConfig, description="a table")

    @field_validator("url")
    @classmethod
    def _url_parses(cls, value: str) -> str:
        try:
            parts = urllib.parse.urlsplit(value)
            port = parts.port
        except ValueError as exc:
            # The exception's text may quote the URL, password and all: never shown.
            msg = f"not a URL ({type(exc).__name__})"
            raise ValueError(msg) from None
        if not parts.hostname:
            msg = "the URL names no host"
            raise ValueError(msg)
        if port == 0:
            msg = "the URL's port is 0"
            raise ValueError(msg)
        return value

    @field_validator("margin")
    @classmethod
    def _margin_below_lease(cls, value: float, info: t.Any) -> float:
        lease = info.data.get("lease")
        if isinstance(lease, float | int) and value >= lease:
            msg = f"{value:g} s is not less than the lease ({lease:g} s)"
            raise ValueError(msg)
        return value

    @field_serializer("url")
    def _url_without_password(self, value: str) -> str:
        # `poli config` prints the configuration: the password never goes with it.
        return redact_url(value)

    def project_name(self, root: Path) -> str:
        """The fleet's name of the project in directory ``root``.

        Examples
        --------
        >>> FleetConfig(url="redis://127.0.0.1").project_name(Path("/src/my app"))
        'my-app'
        >>> FleetConfig(url="redis://127.0.0.1", project="shop").project_name(Path("/x"))
        'shop'
        """
        if self.project is not None:
            return self.project
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name).strip("-.")[:63]
        return name or "root"
