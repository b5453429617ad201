"""A fleet: one project's agents on several machines, their work claimed through Redis.

The library part of the fleet (no driver, no terminal): the connection
(:mod:`~politerm.fleet.connect`), the work queue on Redis Streams with leases fenced by
epochs (:mod:`~politerm.fleet.queue`, values in :mod:`~politerm.fleet.work`), the nodes'
heartbeats (:mod:`~politerm.fleet.nodes`), the fleet-wide budget breaker
(:mod:`~politerm.fleet.budget`). ``poli node`` builds on it. See docs/fleet.md.
"""

from __future__ import annotations

from politerm.fleet.board import Board, BoardRow
from politerm.fleet.budget import Caps, FleetBudget, Spending, Verdict
from politerm.fleet.connect import Connection, connect, connect_config
from politerm.fleet.keys import GROUP, Keys
from politerm.fleet.ledger import LateResult, Paused
from politerm.fleet.nodes import Backlog, NodeQueue, NodeStatus, Registry
from politerm.fleet.queue import WorkQueue
from politerm.fleet.work import Lease, Result, Work, WorkKind, WorkRecord, WorkState

__all__ = [
    "GROUP",
    "Backlog",
    "Board",
    "BoardRow",
    "Caps",
    "Connection",
    "FleetBudget",
    "Keys",
    "LateResult",
    "Lease",
    "NodeQueue",
    "NodeStatus",
    "Paused",
    "Registry",
    "Result",
    "Spending",
    "Verdict",
    "Work",
    "WorkKind",
    "WorkQueue",
    "WorkRecord",
    "WorkState",
    "connect",
    "connect_config",
]
