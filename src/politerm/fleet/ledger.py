"""What the fleet's queue keeps of work that did not simply end: late results, dead letters, pauses.

:class:`~politerm.fleet.queue.WorkQueue` appends a late outcome of a fenced attempt to the
project's ``late`` stream, a piece of work out of attempts to its ``dead`` stream, and work a
budget cap paused to its ``paused`` hash. Its :attr:`~politerm.fleet.queue.WorkQueue.ledger`
reads them back for ``poli work``, ``poli fleet`` and the views.
"""

from __future__ import annotations

import json
import typing as t

from politerm.fleet.work import Result, WorkState

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.fleet.connect import Connection
    from politerm.fleet.keys import Keys

__all__ = ["LateResult", "Ledger", "Paused"]


def as_int(value: t.Any) -> int:
    """A Redis field as a whole number; 0 when it is missing or not one."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def as_outcome(text: str | None) -> dict[str, t.Any]:
    """A stored outcome (JSON) as a mapping; text that is not a JSON object is wrapped."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}


class LateResult(t.NamedTuple):
    """An outcome rejected because its attempt had been fenced (kept visible)."""

    work_id: str
    agent: str
    epoch: int
    node: str
    current_epoch: int
    state: str
    outcome: Mapping[str, t.Any]


class Paused(t.NamedTuple):
    """Work a budget cap paused before it was typed (it resumes when the cap allows)."""

    work_id: str
    agent: str
    node: str
    """The node whose breaker paused it."""
    reason: str
    since: float
    """Redis's time of the pause (seconds since 1970)."""


class Ledger:
    """The queue's records of late results, dead letters and paused work (read only)."""

    def __init__(self, conn: Connection, keys: Keys) -> None:
        self.conn = conn
        self.keys = keys

    def paused(self) -> list[Paused]:
        """The work a budget cap paused, oldest first (each with its reason)."""
        with self.conn.talking("listing the paused work"):
            raw = self.conn.cmd.hgetall(self.keys.paused)
        out = []
        for work_id, text in raw.items():
            fields = as_outcome(text)
            out.append(
                Paused(
                    work_id,
                    str(fields.get("agent", "")),
                    str(fields.get("node", "")),
                    str(fields.get("reason", "")),
                    as_int(fields.get("at")) / 1000,
                )
            )
        return sorted(out, key=lambda p: p.since)

    def _newest(self, key: str, count: int, what: str) -> list[dict[str, str]]:
        with self.conn.talking(f"reading {what}"):
            return [fields for _entry, fields in self.conn.cmd.xrevrange(key, count=count)]

    def late_results(self, count: int = 100) -> list[LateResult]:
        """The newest rejected late results, newest first."""
        return [
            LateResult(
                f.get("id", ""),
                f.get("agent", ""),
                as_int(f.get("epoch")),
                f.get("node", ""),
                as_int(f.get("current")),
                f.get("state", ""),
                as_outcome(f.get("outcome")),
            )
            for f in self._newest(self.keys.late, count, "late results")
        ]

    def dead_letters(self, count: int = 100) -> list[Result]:
        """The newest dead letters, newest first (their outcome: the error)."""
        dead = WorkState.DEAD
        return [
            Result(
                f.get("id", ""),
                f.get("agent", ""),
                dead,
                {"error": f.get("error", "")},
                0,
                "",
                as_int(f.get("attempts")),
            )
            for f in self._newest(self.keys.dead, count, "dead letters")
        ]
