"""Live agent state for ``poli status``, and the event-driven ``--watch`` loop.

The store holds the state the router last wrote; between routers (or after a crash) that can
be stale. :class:`LiveAgents` asks tmux instead: a pane that is gone or dead is EXITED at
once, and a live pane's state is read from its screen with the agent's profile.

:func:`watch` redraws only when something changed: a commit to the store (any process; see
:class:`politerm.store.watch.StoreWatch`), output or death of an agent's pane (tmux control
mode), or a window closing. An idle session costs nothing but the sleeping watchers, however
many agents it has.
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
from politerm.agents.state import AgentState
from politerm.errors import PolitermError, TmuxError
from politerm.store.watch import EventCursor, StoreWatch

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from politerm.agents.profile import AgentProfile
    from politerm.store import RunStore
    from politerm.store.models import Agent, Event
    from politerm.tmux.control import ControlClient, Notification
    from politerm.tmux.server import TmuxServer

__all__ = ["LiveAgents", "all_sessions", "watch"]

log = logging.getLogger(__name__)

EXITED = AgentState.EXITED.value

# Notifications after which any pane may be gone or dead.
_STRUCTURAL = frozenset({"window-close", "unlinked-window-close", "exit", "sessions-changed"})

WATCH_BACKSTOP = 30.0
"""Longest ``watch`` sleeps with no event at all (covers a lost notification)."""

READ_BOUND = 10.0
"""Longest ``watch`` waits for the panes' live states before it tries again."""

RETRY_READ = 1.0
"""How long ``watch`` waits before reading again after a failed read."""

MIN_REDRAW = 0.25
"""Shortest interval between two redraws: a burst of output is drawn once."""


class LiveAgents:
    """The live state of a store's agents, read from their tmux panes.

    Parameters
    ----------
    server
        The private tmux server the agents run on.

    Notes
    -----
    Use :meth:`states` for a one-off reading. For a live view, :meth:`event` returns an
    event set when an agent's pane printed, died or closed; :meth:`states` then re-reads
    only those agents' screens (the others keep their last reading).
    """

    def __init__(self, server: TmuxServer) -> None:
        self.server = server
        self._clients: dict[str, ControlClient] = {}
        self._unsubscribe: list[Callable[[], None]] = []
        self._profiles: dict[str, AgentProfile | None] = {}
        self._known: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._all_dirty = True
        self._panes: dict[str, str] = {}  # pane id -> agent name
        # Session -> pane id -> pane_dead, as last listed and then as tmux announced since.
        self._dead: dict[str, dict[str, bool]] = {}
        self.pane_listings = 0
        """How many times a session's pane list was read from tmux."""
        self._event = asyncio.Event()
        #: Agent name → when its limit resets, as its screen says (LIMITED agents only).
        self.resets: dict[str, float] = {}

    def event(self) -> asyncio.Event:
        """An event set at the next change of any watched agent pane."""
        return self._event

    async def close(self) -> None:
        """Drop the subscriptions (the server's control connections are the caller's)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        self._clients.clear()

    def _changed(self, agent: str | None) -> None:
        if agent is None:
            self._all_dirty = True
        else:
            self._dirty.add(agent)
        event, self._event = self._event, asyncio.Event()
        event.set()

    def _on_note(self, note: Notification) -> None:
        if note.name in _STRUCTURAL:
            self._dead.clear()
            self._changed(None)
        elif note.name == "layout-change":
            # A pane killed beside others in its window: gone without a window-close.
            self._dead.clear()
        elif note.name == "subscription-changed":
            # "%subscription-changed poli-dead $s @w i %p : 1": the pane's program died; 0
            # is every pane's first report (or a respawn). Either way the listing read last
            # is kept true, so a redraw need not list the session's panes again.
            pane = next((a for a in note.args if a.startswith("%")), None)
            dead = note.args[-1:] == ("1",)
            for panes in self._dead.values():
                if pane in panes:
                    panes[pane] = dead
            if dead:
                self._changed(self._panes.get(pane) if pane else None)

    async def _client(self, session: str) -> ControlClient | None:
        client = self._clients.get(session)
        if client is not None and client.dead_reason is None:
            return client
        # A new connection: what the old one announced may have been missed.
        self._dead.pop(session, None)
        try:
            if not await self.server.has_session(session):
                return None
            client = await self.server.connect(session)
        except (TmuxError, OSError) as exc:
            log.debug("live status: session %s: %s", session, exc)
            return None
        self._clients[session] = client
        self._unsubscribe.append(client.on_notification(self._on_note))
        return client

    def _watch_pane(self, client: ControlClient, agent: Agent) -> None:
        if self._panes.get(agent.pane_id) == agent.name:
            return
        self._panes[agent.pane_id] = agent.name
        name = agent.name
        self._unsubscribe.append(
            client.subscribe(agent.pane_id, lambda _p, _d: self._changed(name))
        )

    def _profile(self, name: str) -> AgentProfile | None:
        if name not in self._profiles:
            from politerm.agents.profile import load_profile

            try:
                self._profiles[name] = load_profile(name)
            except PolitermError:
                self._profiles[name] = None
        return self._profiles[name]

    async def states(self, agents: Iterable[Agent]) -> dict[str, str]:
        """Agent name → live state (an :class:`AgentState` value).

        A pane that is gone, or whose program exited, is EXITED; a session that is not up
        makes all of its agents EXITED. The first call reads every screen, later calls only
        those of agents whose pane changed since.
        """
        out: dict[str, str] = {}
        by_session: dict[str, list[Agent]] = {}
        for agent in agents:
            by_session.setdefault(agent.session, []).append(agent)
        everything, self._all_dirty = self._all_dirty, False
        dirty, self._dirty = self._dirty, set()
        for session, members in by_session.items():
            client = await self._client(session)
            if client is None:
                out.update((a.name, EXITED) for a in members)
                continue
            panes = self._dead.get(session)
            if panes is None or any(a.pane_id not in panes for a in members):
                # Listed once, then kept by tmux's announcements (see _on_note): one
                # list-panes per redraw would be tmux server work growing with the panes.
                panes = self._dead[session] = await _dead_panes(client, session)
                self.pane_listings += 1
            for agent in members:
                self._watch_pane(client, agent)
                if panes.get(agent.pane_id, True):
                    out[agent.name] = EXITED
                    continue
                known = self._known.get(agent.name)
                if known is not None and not everything and agent.name not in dirty:
                    out[agent.name] = known
                    continue
                out[agent.name] = await self._read(client, agent)
        self._known.update(out)
        return out

    async def _read(self, client: ControlClient, agent: Agent) -> str:
        from politerm.tmux.pane import Pane

        profile = self._profile(agent.profile)
        if profile is None:
            return agent.state
        try:
            snap = await Pane(client, agent.pane_id, self.server).snapshot()
        except TmuxError:
            return EXITED
        if not snap.alive:
            return EXITED
        reading = profile.detect(snap)
        state = reading.state
        if state is AgentState.LIMITED and agent.state != state.value:
            # A limit message the driver already answered stays on screen a while; only the
            # driver (which saw what came after it) says whether it still holds.
            state = profile.detect(snap, limited=False).state
        self.resets.pop(agent.name, None)
        if state is AgentState.LIMITED and reading.reset_at is not None:
            self.resets[agent.name] = reading.reset_at
        return state.value


_SESSION_FORMAT = "\t".join(  # noqa: FLY002  # one field a line reads better
    [
        "#{session_name}",
        "#{session_windows}",
        "#{session_attached}",
        "#{session_path}",
        "#{@poli_store}",
        # Last: a directory may hold a tab.
        "#{@poli_project}",
    ]
)


async def all_sessions(server: TmuxServer) -> list[dict[str, t.Any]]:
    """Every session on the private server with its project directory and live agents.

    A loop session names its project and store (set by ``poli up``); any other session
    (a pipeline run's) shows its working directory. Agents come from the session's store,
    in their live state.
    """
    from politerm.store import RunStore

    rc, out, _ = await server.run("list-sessions", "-F", _SESSION_FORMAT)
    if rc != 0:
        return []
    sessions: list[dict[str, t.Any]] = []
    live = LiveAgents(server)
    try:
        for line in out.splitlines():
            name, windows, attached, path, store_path, project = (line.split("\t", 5) + [""] * 6)[
                :6
            ]
            agents: dict[str, str] = {}
            if store_path and pathlib.Path(store_path).is_file():
                with RunStore.open(pathlib.Path(store_path)) as store:
                    mine = [a for a in store.list_agents() if a.session == name]
                    agents = await live.states(mine)
            sessions.append(
                {
                    "session": name,
                    "project": project or path,
                    "store": store_path or None,
                    "windows": int(windows or 0),
                    "attached": attached not in ("", "0"),
                    "agents": agents,
                }
            )
    finally:
        await live.close()
    return sessions


async def _dead_panes(client: ControlClient, session: str) -> dict[str, bool]:
    """Pane id → whether its program exited, for every pane of ``session`` (one command)."""
    try:
        lines = await client.cmd(
            "list-panes", "-s", "-t", f"={session}", "-F", "#{pane_id}\t#{pane_dead}"
        )
    except TmuxError:
        return {}
    panes: dict[str, bool] = {}
    for line in lines:
        pane_id, _, dead = line.partition("\t")
        panes[pane_id] = dead == "1"
    return panes


async def watch(
    store: RunStore,
    live: LiveAgents | None,
    draw: Callable[[dict[str, t.Any]], None],
    *,
    collect: Callable[..., dict[str, t.Any]],
    events: int = 15,
    stop: asyncio.Event | None = None,
) -> None:
    """Redraw the status on every change until ``stop`` is set (or forever).

    Parameters
    ----------
    store
        The run store to show.
    live
        Where live agent states come from; None shows the stored ones.
    draw
        Called with :func:`politerm.status.collect`'s data after each change.
    collect
        :func:`politerm.status.collect` (passed in to keep this module below the CLI).
    events
        How many recent events to show.
    stop
        Ends the loop when set.
    """
    stop = stop or asyncio.Event()
    recent: list[Event] = store.list_events(limit=events)
    cursor = EventCursor(store, after=recent[-1].id if recent else 0)
    async with StoreWatch(store.path) as sw:
        last_draw = 0.0
        while not stop.is_set():
            store_changed = sw.event()
            pane_changed = live.event() if live is not None else asyncio.Event()
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
            data["events"] = [_event_row(e) for e in recent]
            draw(data)
            last_draw = time.monotonic()
            await wait_any(store_changed, pane_changed, stop, timeout=WATCH_BACKSTOP)
            # Coalesce a burst (an agent streaming output) into one redraw.
            pause = MIN_REDRAW - (time.monotonic() - last_draw)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await stop.wait()


def _event_row(e: Event) -> dict[str, t.Any]:
    return {
        "id": e.id,
        "ts": e.ts,
        "kind": e.kind,
        "task": e.task_id,
        "agent": e.agent,
        "detail": e.detail,
    }
