"""What a fleet's router keeps in this machine's store for ``poli status`` (meta keys).

Written by the router's fleet parts (``fleetlink.RouterSeat``, ``remote.RemoteTurns``),
read by ``poli status``: a light module, so that neither the status view nor the fleet's
link imports the other's dependencies (redis-py; the router's loop).
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from politerm.store import RunStore

__all__ = ["BUDGET_PAUSED", "ROUTER_META", "budget_paused"]

ROUTER_META: t.Final = "fleet-router"
"""This machine's router in the fleet's router role (JSON: active, standby or fenced)."""
BUDGET_PAUSED: t.Final = "fleet-paused:"
"""The prefix of a task whose remote turn the fleet's budget paused (value: the reason)."""


def budget_paused(store: RunStore) -> dict[str, str]:
    """The tasks whose remote turn waits for the fleet's budget, with the breaker's reason."""
    return {k[len(BUDGET_PAUSED) :]: v for k, v in store.meta_values(BUDGET_PAUSED).items()}
