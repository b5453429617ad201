"""The event-driven ``poli status --watch`` loop, and ``poli status --all``'s sessions.

Agent states come from the driver's :class:`~politerm.driver.observer.Observer`: the state
each agent's driver stored, EXITED at once when its pane is gone or dead (a dead agent's
driver may not be running to say so). Nothing here reads an agent's screen.

:func:`watch` redraws only when something changed: a commit to the store (any process; see
:class:`politerm.store.watch.StoreWatch`, which is how a state, an approval or a turn's end
the driver recorded arrives), the death of an agent's pane, or a window closing. An idle
session costs nothing but the sleeping watchers, however many agents it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import sqlite3
import time
import typing as t

from politerm._internal.aio import wait_any
from politerm.errors import PolitermError, StoreError
from politerm.status import event_row
from politerm.store.watch import EventCursor, StoreWatch

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.driver.observer import Observer
    from politerm.store import RunStore
    from politerm.store.models import Event

__all__ = ["all_sessions", "watch"]

log = logging.getLogger(__name__)

WATCH_BACKSTOP = 30.0
"""Longest ``watch`` sleeps with no event at all (covers a lost notification)."""

READ_BOUND = 10.0
"""Longest ``watch`` waits for the agents' states before it tries again."""

RETRY_READ = 1.0
"""How long ``watch`` waits before reading again after a failed read."""

MIN_REDRAW = 0.25
"""Shortest interval between two redraws: a burst of output is drawn once."""


async def all_sessions(observer: Observer) -> list[dict[str, t.Any]]:
    """Every session on the private server with its project directory and agents' states.

    A loop session names its project and store (set by ``poli up``); any other session
    (a pipeline run's) shows its working directory. Agents come from the session's store,
    in the states the observer gives (EXITED once their panes are gone or dead).
    """
    from politerm.store import RunStore

    sessions: list[dict[str, t.Any]] = []
    for ses in await observer.sessions():
        agents: dict[str, str] = {}
        if ses.store and pathlib.Path(ses.store).is_file():
            try:
                # As it is: listing sessions must not migrate their projects' stores.
                store = RunStore.open_existing(pathlib.Path(ses.store))
            except StoreError as exc:
                log.warning("session %s: not reading its store: %s", ses.name, exc)
            else:
                with store:
                    mine = [a for a in store.list_agents() if a.session == ses.name]
                    agents = await observer.states(mine)
        sessions.append(
            {
                "session": ses.name,
                "project": ses.project or ses.path,
                "store": ses.store or None,
                "windows": ses.windows,
                "attached": ses.attached,
                "agents": agents,
            }
        )
    return sessions


async def watch(
    store: RunStore,
    live: Observer | None,
    draw: Callable[[dict[str, t.Any]], None],
    *,
    collect: Callable[..., dict[str, t.Any]],
    events: int = 15,
    stop: asyncio.Event | None = None,
    also: Callable[[], asyncio.Event] | None = None,
) -> None:
    """Redraw the status on every change until ``stop`` is set (or forever).

    Parameters
    ----------
    store
        The run store to show.
    live
        The observer of the agents' panes (EXITED at once); None shows the stored states.
    draw
        Called with :func:`politerm.status.collect`'s data after each change.
    collect
        :func:`politerm.status.collect` (passed in to keep this module below the CLI).
    events
        How many recent events to show.
    stop
        Ends the loop when set.
    also
        Another source of changes (the fleet's board): an event set by its next change.
    """
    stop = stop or asyncio.Event()
    recent: list[Event] = store.list_events(limit=events)
    cursor = EventCursor(store, after=recent[-1].id if recent else 0)
    async with StoreWatch(store.path) as sw:
        last_draw = 0.0
        while not stop.is_set():
            store_changed = sw.event()
            pane_changed = live.event() if live is not None else asyncio.Event()
            other_changed = also() if also is not None else asyncio.Event()
            try:
                recent = [*recent, *cursor.read()][-events:]
                states = None
                agents = store.list_agents()  # read once a redraw: 500 rows at 500 agents
                if live is not None:
                    # Bounded: a tmux command that never answers must not freeze the view.
                    async with asyncio.timeout(READ_BOUND):
                        states = await live.states(agents)
                resets = live.resets if live is not None else None
                data = collect(store, events=0, live=states, resets=resets, agents=agents)
            except (PolitermError, sqlite3.Error, OSError, TimeoutError) as exc:
                # A pane vanishing mid-read or a store busy with a writer must not end the
                # view: say so and read again shortly.
                log.warning("status: could not read (%s); trying again", exc or "no answer in time")
                await wait_any(stop, timeout=RETRY_READ)
                continue
            data["events"] = [event_row(e) for e in recent]
            draw(data)
            last_draw = time.monotonic()
            await wait_any(store_changed, pane_changed, other_changed, stop, timeout=WATCH_BACKSTOP)
            # Coalesce a burst (an agent streaming output) into one redraw.
            pause = MIN_REDRAW - (time.monotonic() - last_draw)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await stop.wait()
