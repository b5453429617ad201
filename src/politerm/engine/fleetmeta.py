"""What a fleet's router keeps in this machine's store for ``poli status`` (meta keys).

Written by the router's fleet parts (``fleetlink.RouterSeat``, ``remote.RemoteTurns``,
``fleetbudget.RouterBreaker``), read by ``poli status``: a light module, so that neither
the status view nor the fleet's link imports the other's dependencies (redis-py; the
router's loop).
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from politerm.store import RunStore

__all__ = ["BUDGET_PAUSED", "ROUTER_META", "budget_paused", "show_budget_pause"]

ROUTER_META: t.Final = "fleet-router"
"""This machine's router in the fleet's router role (JSON: active, standby or fenced)."""
BUDGET_PAUSED: t.Final = "fleet-paused:"
"""The prefix of a task whose remote turn the fleet's budget paused (value: the reason)."""


def budget_paused(store: RunStore) -> dict[str, str]:
    """The tasks whose remote turn waits for the fleet's budget, with the breaker's reason."""
    return {k[len(BUDGET_PAUSED) :]: v for k, v in store.meta_values(BUDGET_PAUSED).items()}


def show_budget_pause(store: RunStore, agent: str, task_id: str | None, reason: str | None) -> None:
    """Keep the store's word on a budget pause of ``agent``'s turn for ``task_id`` true.

    ``reason``: the breaker's (None: the turn goes on). An event says so once, when the
    word changes; the task stays in its step meanwhile (its prompt not delivered, so its
    clock stands still).
    """
    key = f"{BUDGET_PAUSED}{task_id or agent}"
    shown = store.get_meta(key) or None
    if shown == reason:
        return
    with store.batch():
        store.set_meta(key, reason or "")
        if reason is not None:
            why = f"{agent}'s turn paused by the fleet's budget: {reason}"
            store.add_event("budget-paused", task_id=task_id, agent=agent, detail=why)
        else:
            why = f"{agent}'s turn goes on: the fleet's budget allows it"
            store.add_event("budget-resumed", task_id=task_id, agent=agent, detail=why)
