"""The terminal host of a project: where every workflow's agents run.

A workflow never opens a tmux window, lists panes or kills a session itself: it asks its
:class:`Host` (one session on the project's private tmux servers) to bring the session up,
to start an agent there (with its hook receipts, in a new window or respawned in its old
pane), to find the agents already running after a restart, and to take them down. Headless
agents run in PTYs through :meth:`AgentDriver.start` without a host.

A session with many agents spans several servers (shards, :mod:`politerm.tmux.shards`):
tmux's own loop costs time in proportion to every pane of its server, so no server gets
more than ``shard_size`` agents. Shard 0 is the configured server, where the session's
control window lives; a new agent goes to the least full shard of those the session needs.
Callers see one host: a :class:`Pane` carries its own server, and :meth:`Host.socket_of`
names it for the agent's row.

Layer: the driver's start path, above ``tmux/`` and ``pty/``; ``engine/``, ``messaging/``
and ``manager/`` (and every other workflow) use it instead of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import typing as t

from politerm.driver.agent import AgentDriver
from politerm.driver.launch import Launched, launch
from politerm.driver.receipts import PANE_OPTION
from politerm.driver.statedir import state_dir
from politerm.errors import ServerNotRunning, SessionNotFound, TmuxCommandError, TmuxError
from politerm.project import PROJECT_OPTION, STORE_OPTION
from politerm.tmux.pane import Pane, agent_panes, hide_tmux, new_window
from politerm.tmux.server import TmuxServer
from politerm.tmux.shards import SHARD_WINDOW, shard_index, shard_socket, shard_sockets

if t.TYPE_CHECKING:
    import os
    import pathlib
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from politerm.agents.approval import ApprovalPolicy
    from politerm.agents.profile import AgentProfile
    from politerm.config import Config
    from politerm.driver.limits import LimitPolicy
    from politerm.driver.tokens import Budget
    from politerm.store import RunStore


DEFAULT_SHARD_SIZE = 50
"""Agents per tmux server unless ``[tmux] shard_size`` says otherwise (see the module)."""


class Host:
    """One session on a project's private tmux servers: its agents' terminal host.

    Parameters
    ----------
    server
        The private tmux server the session starts on (shard 0, its control window).
    session
        The tmux session the agents run in (the same name on every shard).
    shard_size
        At most this many agents per server; more spread over further servers.
    """

    def __init__(
        self, server: TmuxServer, session: str, *, shard_size: int = DEFAULT_SHARD_SIZE
    ) -> None:
        self.server = server
        self.session = session
        self.shard_size = shard_size
        self._shards: dict[int, TmuxServer] = {0: server}
        self._planned = 1
        # Shard -> agents placed there, counted once and kept by launch().
        self._loads: dict[int, int] | None = None

    def __repr__(self) -> str:
        return f"Host({self.socket}:{self.session})"

    @classmethod
    def at(cls, socket: str, session: str) -> Host:
        """The host of ``session`` on the server of ``socket``, with default settings."""
        return cls(TmuxServer(socket), session)

    @classmethod
    def of(cls, config: Config, session: str | None = None, *, socket: str | None = None) -> Host:
        """The host the configuration names (``[tmux]``), on another session or socket if given."""
        tc = config.tmux
        server = TmuxServer(
            socket or tc.socket, width=tc.width, height=tc.height, history_limit=tc.history_limit
        )
        return cls(server, session if session is not None else tc.session, shard_size=tc.shard_size)

    @property
    def socket(self) -> str:
        """The session's first server's socket name (``tmux -L``): its control window's."""
        return self.server.socket_name

    def on(self, session: str) -> Host:
        """The host of another session on the same servers (sharing their connections)."""
        return Host(self.server, session, shard_size=self.shard_size)

    # --- its servers ----------------------------------------------------------------------

    def socket_of(self, pane: Pane) -> str:
        """The socket of the server ``pane`` runs on: what an agent's row records."""
        return pane.server.socket_name

    def _shard(self, index: int) -> TmuxServer:
        server = self._shards.get(index)
        if server is None:
            name = shard_socket(self.server.socket_name, self.session, index)
            server = self._shards[index] = self.server.sibling(name)
        return server

    def shard_of(self, socket: str) -> TmuxServer | None:
        """The server of this session's shard on ``socket`` (None: not one of its shards)."""
        index = shard_index(self.server.socket_name, self.session, socket)
        return None if index is None else self._shard(index)

    def shards(self) -> list[TmuxServer]:
        """Shard 0 and every further shard of the session that has a socket file."""
        for socket in shard_sockets(self.server.socket_name, self.session):
            self.shard_of(socket)
        return [self._shards[i] for i in sorted(self._shards)]

    def plan(self, agents: int, found: t.Mapping[str, Pane] | None = None) -> int:
        """Spread the next agents over the shards ``agents`` in all need; returns how many.

        Without a plan a shard fills up before the next opens; with one, ``agents`` agents
        go round the shards evenly (60 agents of 50 per shard: 30 and 30). ``found`` is the
        caller's fresh :meth:`agent_panes`, counted instead of listing every server again.
        """
        self._planned = max(1, math.ceil(agents / self.shard_size))
        # Counted again: agents may have died with a server since.
        self._loads = None if found is None else self._count(found)
        return self._planned

    def _count(self, panes: t.Mapping[str, Pane]) -> dict[int, int]:
        """Agents per shard among ``panes``."""
        loads: dict[int, int] = {}
        for pane in panes.values():
            index = shard_index(self.socket, self.session, pane.server.socket_name)
            if index is not None:
                loads[index] = loads.get(index, 0) + 1
        return loads

    # --- the session ----------------------------------------------------------------------

    async def is_up(self) -> bool:
        """Whether the session exists (on its first server, where it starts)."""
        return await self.server.has_session(self.session)

    async def up_anywhere(self) -> bool:
        """Whether the session exists on any of its servers (its first one may have died)."""
        found = await asyncio.gather(*(s.has_session(self.session) for s in self.shards()))
        return any(found)

    async def sessions(self) -> list[str]:
        """Every session on the server (none when it is not running)."""
        return await self.server.list_sessions()

    async def ensure(
        self,
        *,
        window: str = "control",
        argv: Sequence[str] | None = None,
        cwd: str | pathlib.Path | None = None,
        options: Mapping[str, str] | None = None,
        revive: bool = False,
    ) -> bool:
        """Create the session unless it exists; True if it was created.

        Its first window (``window``) runs ``argv`` (default a shell); ``options`` are
        session user options (``@name``) set on a new session. With ``revive``, a session
        that exists gets ``argv`` started again in its first window if it ended there.
        """
        created = await self.server.ensure_session(
            self.session, window_name=window, argv=argv, cwd=cwd, options=options
        )
        if not created and revive and argv is not None:
            client = await self.server.connect(self.session)
            try:
                lines = await client.cmd(
                    "list-panes", "-t", f"={self.session}:0", "-F", "#{pane_id}\t#{pane_dead}"
                )
            except TmuxCommandError:
                lines = []  # no first window any more: nothing to start again
            for pane_id, _, dead in (line.partition("\t") for line in lines):
                if dead == "1":
                    await (await self.server.pane(self.session, pane_id)).respawn(argv, cwd=cwd)
        return created

    async def kill(self) -> None:
        """Kill the session on every server; a server goes (socket, config) with its last one.

        Raises
        ------
        SessionNotFound
            No server has the session.
        """
        killed = False
        for server in self.shards():
            try:
                await server.kill_session(self.session)
            except SessionNotFound:
                continue
            killed = True
        self._loads = None
        if not killed:
            msg = f"no tmux session {self.session!r} on socket {self.socket!r}"
            raise SessionNotFound(msg)

    async def kill_servers(self) -> None:
        """Stop every server of the session, whatever else runs there, and remove its files.

        For a private server that belongs to one throwaway project (a demo's). A server
        that is not running has its leftover socket file and generated config removed.
        """
        for server in self.shards():
            rc, _, _ = await server.run("list-sessions")
            if rc == 0:
                await server.kill_server()
            else:
                await server.kill_server_files()
        self._loads = None

    async def close(self) -> None:
        """Close this process's connections to the servers (the agents keep running)."""
        for server in self._shards.values():
            await server.close()

    # --- its agents -----------------------------------------------------------------------

    async def agent_panes(self) -> dict[str, Pane]:
        """The session's agent panes (``@poli_agent``) by agent name, one listing per server.

        A further shard whose server is gone has no agents (their rows still name it).
        """
        try:
            first = await agent_panes(await self.server.connect(self.session), self.server)
        except (SessionNotFound, ServerNotRunning):
            first = {}  # its first server died before the others (poli down still finds them)
        others = await asyncio.gather(*(self._shard_panes(s) for s in self.shards()[1:]))
        found: dict[str, Pane] = {}
        for panes in (first, *others):
            for name, pane in panes.items():
                found.setdefault(name, pane)
        return found

    async def _shard_panes(self, server: TmuxServer) -> dict[str, Pane]:
        try:
            if not await server.has_session(self.session):
                return {}
            return await agent_panes(await server.connect(self.session), server)
        except (TmuxError, OSError):
            return {}

    async def _place(self) -> TmuxServer:
        """The server for a new agent: the least full of the shards the session needs."""
        if self._loads is None:
            self._loads = self._count(await self.agent_panes())
        loads = self._loads
        needed = math.ceil((sum(loads.values()) + 1) / self.shard_size)
        count = max(self._planned, needed)
        index = min(range(count), key=lambda i: (loads.get(i, 0), i))
        loads[index] = loads.get(index, 0) + 1
        server = self._shard(index)
        if index > 0:
            await self._open_shard(server, index)
        return server

    async def _open_shard(self, server: TmuxServer, index: int) -> None:
        """Create the session on a further shard, tagged with the first one's project."""
        if await server.has_session(self.session):
            return
        rc, out, _ = await self.server.run(
            "display-message",
            "-p",
            "-t",
            f"={self.session}:",
            f"#{{{PROJECT_OPTION}}}\t#{{{STORE_OPTION}}}",
        )
        project, _, store = out.rstrip("\n").partition("\t") if rc == 0 else ("", "", "")
        options = {k: v for k, v in ((PROJECT_OPTION, project), (STORE_OPTION, store)) if v}
        # Its first window is a pane that has already exited (remain-on-exit keeps it):
        # a session needs one window, and a dead pane costs the server nothing.
        note = (
            f"politerm: shard {index} of session {self.session}; its agents have the other windows"
        )
        await server.ensure_session(
            self.session, window_name=SHARD_WINDOW, argv=["echo", note], options=options
        )

    async def find_agent_pane(self, name: str) -> Pane | None:
        """The pane of agent ``name`` in the session, if it has one (alive or dead)."""
        return (await self.agent_panes()).get(name)

    async def attach(
        self,
        name: str,
        profile: AgentProfile,
        *,
        cwd: pathlib.Path | None = None,
        store: RunStore | None = None,
        policy: ApprovalPolicy | None = None,
        approval_key: str | None = None,
        limits: LimitPolicy | None = None,
        budget: Budget | None = None,
    ) -> AgentDriver | None:
        """The driver of agent ``name`` in its pane of the session (alive or dead), if any.

        A restarted workflow takes its agent back with it (its dead pane keeps the screen).
        """
        pane = await self.find_agent_pane(name)
        if pane is None:
            return None
        return AgentDriver(
            name,
            profile,
            pane,
            cwd=cwd,
            store=store,
            policy=policy,
            approval_key=approval_key,
            limits=limits,
            budget=budget,
        )

    async def pane(self, pane_id: str, socket: str = "") -> Pane | None:
        """A handle on pane ``pane_id`` of any session of a server; None if it is gone.

        ``socket`` names the server (an agent's row says which); empty: the first one.
        """
        server = self.server if not socket else self.shard_of(socket) or self.server.sibling(socket)
        rc, out, _ = await server.run("display-message", "-p", "-t", pane_id, "#{session_name}")
        session = out.strip()
        if rc != 0 or not session:
            return None
        return await server.pane(session, pane_id)

    async def launch(
        self,
        name: str,
        profile: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str],
        hooks_dir: pathlib.Path | None,
        hooks: bool = True,
        patterns: Sequence[str] = (),
        replace: Pane | None = None,
        window: str | None = None,
        size: tuple[int, int] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> Launched[Pane]:
        """Start agent ``name`` with its CLI's hook receipts; it is not waited for.

        It gets a new window (``window``, default its name in lower case; ``size``, default
        the server's), or runs again in ``replace`` (its old pane, killing what ran there).
        The pane is tagged with the agent's name and its hook channel, so a driver attaching
        later finds both. See :func:`~politerm.driver.launch.launch` for the rest.
        """

        async def spawn(argv: list[str], env: dict[str, str]) -> Pane:
            if replace is not None:
                await replace.respawn(argv, cwd=cwd, env=env)
                return replace
            server = await self._place()
            return await new_window(
                await server.connect(self.session),
                server,
                session=self.session,
                name=window or name.lower(),
                argv=argv,
                cwd=cwd,
                env=env,
                agent=name,
                size=size,
            )

        launched = await launch(
            name,
            profile,
            argv,
            env=env,
            hooks_dir=hooks_dir,
            spawn=spawn,
            hooks=hooks,
            patterns=patterns,
            say=say,
        )
        if launched.option is not None:
            # A window whose agent died at once cannot be tagged: its start says so.
            with contextlib.suppress(TmuxError):
                await launched.term.set_option(PANE_OPTION, launched.option)
        return launched

    async def stop_agents(self, names: Iterable[str] | None = None) -> list[str]:
        """Kill the process trees of the session's agents (all, or ``names``); who was stopped."""
        found = await self.agent_panes()
        wanted = list(found) if names is None else [n for n in names if n in found]
        for name in wanted:
            await found[name].kill()
        return wanted


__all__ = ["Host", "Launched", "hide_tmux", "state_dir"]
