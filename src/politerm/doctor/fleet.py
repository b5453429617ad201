"""Doctor check of the fleet's Redis (only with a ``[fleet]`` table).

It connects as the nodes do (``[fleet] url``, the password variable, ``ca_file``) and
says whether Redis answers and accepts the user, which version it runs, and — where the
user may look (``INFO`` is a dangerous command an ACL user may lack) — whether the AOF is
on: without it a Redis restart loses acknowledged work (docs/fleet.md).
"""

from __future__ import annotations

import typing as t

from politerm.doctor import CheckResult, Status
from politerm.errors import FleetAuthError, FleetError, FleetRefused, FleetUnavailable

if t.TYPE_CHECKING:
    from collections.abc import Iterable

    from politerm.doctor import DoctorContext
    from politerm.fleet.connect import Connection

NAME = "fleet"
MIN_VERSION = (7, 0)
"""XINFO's lag and scripts that run XREADGROUP: Redis 7.0 or newer."""


def _version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` as numbers (unreadable parts are 0).

    Examples
    --------
    >>> _version("7.0.15"), _version("6.2"), _version("x")
    ((7, 0, 15), (6, 2), (0,))
    """
    return tuple(int(p) if p.isdigit() else 0 for p in text.split("."))


def fleet_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Rows about the fleet's Redis; none when the project has no ``[fleet]``."""
    config = ctx.config()
    if config is None or config.fleet is None:
        return []
    from politerm.fleet.connect import connect_config

    fleet = config.fleet
    try:
        conn = connect_config(
            fleet.model_copy(update={"timeout": min(fleet.timeout, ctx.timeout)}), ctx.env
        )
    except FleetRefused as exc:
        return [CheckResult(NAME, Status.FAIL, str(exc), "see docs/fleet.md: Redis setup")]
    try:
        with conn.talking("asking its version"):
            hello = conn.cmd.execute_command("HELLO")
        # redis-py makes a dict of HELLO's reply; a flat list is its plain RESP2 shape.
        info = (
            hello if isinstance(hello, dict) else dict(zip(hello[::2], hello[1::2], strict=False))
        )
        version = str(info.get("version", "?"))
        if _version(version) < MIN_VERSION:
            want = ".".join(map(str, MIN_VERSION))
            fix = f"use Redis {want} or newer"
            rows = [CheckResult(NAME, Status.FAIL, f"Redis {version} at {conn.where}", fix)]
        else:
            said = f"Redis {version} at {conn.where} accepts node {fleet.node}"
            rows = [CheckResult(NAME, Status.OK, said)]
        rows += _durability(conn)
    except FleetAuthError as exc:
        fix = f"check the ACL user and the password (in the URL or {fleet.password_env})"
        rows = [CheckResult(NAME, Status.FAIL, str(exc), fix)]
    except FleetUnavailable as exc:
        fix = "start Redis, or check the URL and the network"
        rows = [CheckResult(NAME, Status.FAIL, str(exc), fix)]
    finally:
        conn.close()
    return rows


def _durability(conn: Connection) -> list[CheckResult]:
    try:
        with conn.talking("reading its persistence settings"):
            persistence = conn.cmd.info("persistence")
    except FleetError:
        return []  # the ACL user may not run INFO: nothing known, nothing to say
    if int(persistence.get("aof_enabled", 0)):
        return []
    return [
        CheckResult(
            NAME,
            Status.WARN,
            f"Redis at {conn.where} keeps no AOF: a restart loses acknowledged work",
            "appendonly yes, appendfsync always (docs/fleet.md)",
        )
    ]
