"""The one observer of a project's agents: what every view knows of them.

The views (``poli status``, the dashboard, the web monitor) never talk to tmux themselves;
they ask an :class:`Observer`, the read side of the project's private servers (the
configured one, and the further servers a session with many agents spans:
:mod:`politerm.tmux.shards`). It keeps one persistent control-mode connection per session
and server (opened on first use, shared with every mirror of that session, closed by
:meth:`Observer.close`) and offers:

- :meth:`~Observer.panes`: every pane with the agent it runs (one ``list-panes -a``);
  :meth:`~Observer.sessions`: every session with its project and store;
  :meth:`~Observer.processes`: every pane with its process tree's programs;
- :meth:`~Observer.listen`: each :class:`Change` tmux announces on a followed session, the
  sessions, windows or panes changed (``LAYOUT``) or an agent's program exited (``EXITED``,
  once per death: a respawned pane's next death is news again);
- :meth:`~Observer.states`: each agent's state, EXITED when its pane is gone or dead (as
  tmux announces it, the pane list read once per connection and again after a death
  notice), else the state its driver last wrote to the store. Agent screens have one
  reader, the driver: its approvals, turns and states reach the views through the store
  it writes, never through a second reading that could disagree with it. The one
  exception is :attr:`~Observer.resets`: when an agent the store calls LIMITED shows
  when its limit resets, that time is read off its screen, once per limit, for the view
  to show where no driver recorded one;
- :meth:`~Observer.mirror`: a pane's screen, then its output (:mod:`politerm.driver.mirror`).

Nothing here runs on a timer: an idle session costs the sleeping connections only. An
observer made by :meth:`Observer.of` asks tmux for no pane output on its connections
(:meth:`~politerm.tmux.control.ControlClient.quiet`), except while a mirror runs: the views
read the store and tmux's notifications, and tmux would otherwise write every agent's
output to each view too.

Layer: the driver, above ``tmux/``; ``ui/``, ``livestatus`` and ``status`` use it instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import typing as t

from politerm._internal.aio import finish
from politerm.agents.state import AgentState
from politerm.driver.mirror import start_mirror
from politerm.driver.panes import FORMAT, mine, parse_panes
from politerm.driver.processes import list_panes as list_processes
from politerm.errors import PaneNotFound, PolitermError, TmuxError
from politerm.tmux.pane import Pane
from politerm.tmux.server import TmuxServer
from politerm.tmux.shards import shard_sockets

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from politerm.agents.profile import AgentProfile
    from politerm.config import Config
    from politerm.driver.mirror import Mirror, Sink
    from politerm.driver.panes import PaneEntry
    from politerm.driver.processes import PaneProcesses
    from politerm.store.models import Agent
    from politerm.tmux.control import ControlClient, Notification

__all__ = ["Change", "ChangeKind", "Observer", "SessionEntry"]

Where = tuple[str, str]
"""A session on a server: (socket, session)."""

log = logging.getLogger(__name__)

EXITED = AgentState.EXITED.value
LIMITED = AgentState.LIMITED.value

# Notifications after which any pane may be gone or dead.
_STRUCTURAL = frozenset({"window-close", "unlinked-window-close", "exit", "sessions-changed"})
# Notifications after which the pane list may differ (beside the structural ones).
_LAYOUT = frozenset({"session-changed", "window-add", "layout-change", "pane-mode-changed"})

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


class ChangeKind(str, enum.Enum):
    """What tmux announced."""

    LAYOUT = "layout"
    """Sessions, windows or panes came, went, moved or came back to life."""
    EXITED = "exited"
    """A pane's program exited (reported once per death)."""


@dataclasses.dataclass(frozen=True)
class Change:
    """One change on a followed session."""

    kind: ChangeKind
    session: str
    pane_id: str | None = None
    #: The server it happened on (a pane id is only unique on its own server).
    socket: str = ""


@dataclasses.dataclass(frozen=True)
class SessionEntry:
    """One session of the private server, as ``poli up`` tagged it."""

    name: str
    windows: int
    attached: bool
    path: str
    #: The run store ``poli up`` named (``@poli_store``); empty for other sessions.
    store: str
    #: The project directory ``poli up`` named (``@poli_project``); empty for others.
    project: str


class Observer:
    """The read side of a project's private tmux server; see the module's text.

    Parameters
    ----------
    server
        The private tmux server the agents run on. Given, it stays the caller's (its
        connections too); made by :meth:`of`, :meth:`close` closes it.
    """

    def __init__(self, server: TmuxServer) -> None:
        self._server = server
        self._owned = False
        # Socket -> the server (the configured one, then the shards met since).
        self._servers: dict[str, TmuxServer] = {server.socket_name: server}
        self._clients: dict[Where, ControlClient] = {}
        self._unhook: list[Callable[[], None]] = []
        self._listeners: list[Callable[[Change], None]] = []
        # (socket, pane id) -> whether its program had exited when last listed.
        self._dead_seen: dict[tuple[str, str], bool] = {}
        # (socket, session) -> pane id -> dead, as last listed.
        self._dead: dict[Where, dict[str, bool]] = {}
        self._relists: set[asyncio.Task[None]] = set()
        self._event = asyncio.Event()
        self._profiles: dict[str, AgentProfile | None] = {}
        self._resets_read: set[str] = set()
        self.pane_listings = 0
        """How many times a session's pane list was read (by :meth:`states`)."""
        #: Agent name → when its limit resets, as its screen says (LIMITED agents only).
        self.resets: dict[str, float] = {}

    @classmethod
    def of(cls, config: Config, *, socket: str | None = None) -> Observer:
        """The observer of the server the configuration names (``[tmux]``)."""
        tc = config.tmux
        observer = cls(TmuxServer(socket or tc.socket, width=tc.width, height=tc.height))
        observer._owned = True
        return observer

    @property
    def socket(self) -> str:
        """The server's socket name (``tmux -L``): what ``poli attach`` needs."""
        return self._server.socket_name

    async def close(self) -> None:
        """Stop following; close the connections if they are the observer's own.

        The connections to further servers (shards) are always its own.
        """
        for undo in self._unhook:
            undo()
        self._unhook.clear()
        for task in list(self._relists):
            await finish(task)
        self._clients.clear()
        for server in self._servers.values():
            if self._owned or server is not self._server:
                await server.close()

    def _server_of(self, socket: str) -> TmuxServer:
        """The server on ``socket`` (empty: the configured one)."""
        if not socket:
            return self._server
        server = self._servers.get(socket)
        if server is None:
            server = self._servers[socket] = self._server.sibling(socket)
        return server

    def _all_servers(self) -> list[TmuxServer]:
        """The configured server and every shard of its sessions that has a socket file."""
        for socket in shard_sockets(self._server.socket_name):
            self._server_of(socket)
        return list(self._servers.values())

    async def __aenter__(self) -> t.Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- following ------------------------------------------------------------------------

    async def follow(self, session: str, socket: str = "") -> bool:
        """Follow ``session``'s announcements (one connection, kept); False if it is not up.

        ``socket`` names its server when it is not the configured one (a shard).
        """
        return await self._connect(session, socket) is not None

    def listen(self, listener: Callable[[Change], None]) -> Callable[[], None]:
        """Call ``listener`` with each :class:`Change` of a followed session; returns the undo."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def event(self) -> asyncio.Event:
        """An event set at the next change that may change :meth:`states` (a death, a close)."""
        return self._event

    async def _connect(self, session: str, socket: str = "") -> ControlClient | None:
        server = self._server_of(socket)
        where = (server.socket_name, session)
        client = self._clients.get(where)
        if client is not None and client.dead_reason is None:
            return client
        # A new connection: what the old one announced may have been missed.
        self._dead.pop(where, None)
        try:
            client = await server.connect(session)
        except (TmuxError, OSError) as exc:
            log.debug("observer: session %s on %s: %s", session, where[0], exc)
            return None
        if self._clients.get(where) is not client:
            self._clients[where] = client
            self._unhook.append(client.on_notification(lambda n: self._on_note(where, n)))
            if self._owned:
                # The views read layouts, deaths and the store, not output: tmux need not
                # write every agent's output to them too. A mirror turns it on (subscribe).
                try:
                    await client.quiet()
                except (TmuxError, OSError) as exc:
                    log.debug("observer: session %s: output stays on: %s", session, exc)
        return client

    def _publish(self, change: Change) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("observer listener failed on %s", change)

    def _changed(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def _on_note(self, where: Where, note: Notification) -> None:
        socket, session = where
        if note.name == "window-renamed":
            # A pane of the window died or was respawned (politerm.tmux's death hook renames
            # its window to its own name, the one notice tmux sends for it): one look at the
            # session's panes tells which. Nothing else renames windows (allow-rename off).
            task = asyncio.create_task(self._relist(where), name=f"poli-relist-{session}")
            self._relists.add(task)
            task.add_done_callback(self._relists.discard)
            self._publish(Change(ChangeKind.LAYOUT, session, socket=socket))
        elif note.name in _STRUCTURAL:
            self._forget(socket)
            self._changed()
            self._publish(Change(ChangeKind.LAYOUT, session, socket=socket))
        elif note.name in _LAYOUT:
            if note.name == "layout-change":
                # A pane killed beside others in its window: gone without a window-close.
                self._forget(socket)
            self._publish(Change(ChangeKind.LAYOUT, session, socket=socket))

    async def _relist(self, where: Where) -> None:
        client = self._clients.get(where)
        if client is not None:
            self._take(where, await _dead_panes(client, where[1]))
            self.pane_listings += 1

    def _take(self, where: Where, panes: dict[str, bool]) -> None:
        """Keep ``where``'s pane list; announce each pane that died or lives again since."""
        socket, session = where
        self._dead[where] = panes
        died = False
        for pane, dead in panes.items():
            before = self._dead_seen.get((socket, pane))
            self._dead_seen[socket, pane] = dead
            if dead and before is not True:
                died = True
                self._publish(Change(ChangeKind.EXITED, session, pane, socket))
            elif before and not dead:
                self._publish(Change(ChangeKind.LAYOUT, session, pane, socket))
        if died:
            self._changed()

    def _forget(self, socket: str) -> None:
        """Forget the pane lists of one server: any of its panes may be gone or dead."""
        for where in [w for w in self._dead if w[0] == socket]:
            del self._dead[where]

    # --- panes and sessions ---------------------------------------------------------------

    async def panes(self, project: str | None = None) -> list[PaneEntry]:
        """The panes of the private servers (none of a server that is not running).

        With ``project``, sessions another project claims (``@poli_project``) are left out;
        sessions no project claims (pipeline runs, manager...) are kept. A pane of a
        further server (a shard) names its socket (:attr:`PaneEntry.socket`).
        """
        servers = self._all_servers()
        answers = await asyncio.gather(*(s.run("list-panes", "-a", "-F", FORMAT) for s in servers))
        found: list[PaneEntry] = []
        for server, (rc, out, _) in zip(servers, answers, strict=True):
            if rc == 0:
                socket = "" if server is self._server else server.socket_name
                found += parse_panes(out, socket)
        return mine(found, project)

    async def sessions(self) -> list[SessionEntry]:
        """Every session on the private server (empty when it is not running)."""
        rc, out, _ = await self._server.run("list-sessions", "-F", _SESSION_FORMAT)
        if rc != 0:
            return []
        found = []
        for line in out.splitlines():
            name, windows, attached, path, store, project = (line.split("\t", 5) + [""] * 6)[:6]
            found.append(
                SessionEntry(
                    name, int(windows or 0), attached not in ("", "0"), path, store, project
                )
            )
        return found

    async def processes(self) -> list[PaneProcesses]:
        """Every pane with the programs of its process tree (``poli panes``).

        Raises
        ------
        TmuxLookupError
            tmux did not answer (an empty list: no server, or no panes).
        """
        found: list[PaneProcesses] = []
        for server in self._all_servers():
            found += await list_processes(server)
        return found

    # --- agent states ---------------------------------------------------------------------

    async def states(self, agents: Iterable[Agent]) -> dict[str, str]:
        """Agent name → state (an :class:`AgentState` value), as the views show it.

        A pane that is gone, or whose program exited, is EXITED; a session that is not up
        makes all of its agents EXITED; any other agent is in the state its driver stored.
        """
        out: dict[str, str] = {}
        by_session: dict[Where, list[Agent]] = {}
        for agent in agents:
            where = (self._server_of(agent.socket).socket_name, agent.session)
            by_session.setdefault(where, []).append(agent)
        for where, members in by_session.items():
            socket, session = where
            client = await self._connect(session, socket)
            if client is None:
                out.update((a.name, EXITED) for a in members)
                continue
            panes = self._dead.get(where)
            if panes is None or any(a.pane_id not in panes for a in members):
                # Listed once, then again only when tmux announces a death (see _on_note): one
                # list-panes per redraw would be tmux server work growing with the panes.
                panes = await _dead_panes(client, session)
                self._take(where, panes)
                self.pane_listings += 1
            for agent in members:
                state = EXITED if panes.get(agent.pane_id, True) else agent.state
                out[agent.name] = state
                if state != LIMITED:
                    self._resets_read.discard(agent.name)
                    self.resets.pop(agent.name, None)
                elif agent.name not in self._resets_read:
                    self._resets_read.add(agent.name)
                    await self._read_reset(client, agent)
        return out

    async def _read_reset(self, client: ControlClient, agent: Agent) -> None:
        profile = self._profile(agent.profile)
        if profile is None:
            return
        try:
            snap = await Pane(client, agent.pane_id, self._server_of(agent.socket)).snapshot()
        except TmuxError:
            return
        reset_at = profile.detect(snap).reset_at
        if reset_at is not None:
            self.resets[agent.name] = reset_at

    def _profile(self, name: str) -> AgentProfile | None:
        if name not in self._profiles:
            from politerm.agents.profile import load_profile

            try:
                self._profiles[name] = load_profile(name)
            except PolitermError:
                self._profiles[name] = None
        return self._profiles[name]

    # --- mirrors --------------------------------------------------------------------------

    async def mirror(self, pane: PaneEntry, sink: Sink) -> Mirror:
        """Start mirroring ``pane`` into ``sink``: :attr:`Mirror.initial`, then its output.

        Raises
        ------
        PaneNotFound
            The pane or its session is gone.
        """
        client = await self._connect(pane.session, pane.socket)
        if client is None:
            raise PaneNotFound(pane.pane_id, f"its session {pane.session!r} is gone")
        return await start_mirror(client, self._server_of(pane.socket), pane.pane_id, sink)


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
