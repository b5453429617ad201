"""The terminal host of a project: where every workflow's agents run.

A workflow never opens a tmux window, lists panes or kills a session itself: it asks its
:class:`Host` (one private tmux server and one session on it) to bring the session up, to
start an agent there (with its hook receipts, in a new window or respawned in its old
pane), to find the agents already running after a restart, and to take them down. Headless
agents run in PTYs through :meth:`AgentDriver.start` without a host.

Layer: the driver's start path, above ``tmux/`` and ``pty/``; ``engine/``, ``messaging/``
and ``manager/`` (and every other workflow) use it instead of them.
"""

from __future__ import annotations

import contextlib
import typing as t

from politerm.agents.profile import load_profile
from politerm.driver.agent import AgentDriver
from politerm.driver.launch import Launched, launch
from politerm.driver.receipts import PANE_OPTION
from politerm.errors import TmuxError
from politerm.tmux.pane import Pane, agent_panes, hide_tmux, new_window
from politerm.tmux.server import TmuxServer, default_config_dir

if t.TYPE_CHECKING:
    import os
    import pathlib
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from politerm.agents.approval import ApprovalPolicy
    from politerm.config import Config
    from politerm.store import RunStore


class Host:
    """One session on a project's private tmux server: its agents' terminal host.

    Parameters
    ----------
    server
        The private tmux server (one socket).
    session
        The tmux session the agents run in.
    """

    def __init__(self, server: TmuxServer, session: str) -> None:
        self.server = server
        self.session = session

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
        return cls(server, session if session is not None else tc.session)

    @property
    def socket(self) -> str:
        """The server's socket name (``tmux -L``)."""
        return self.server.socket_name

    def on(self, session: str) -> Host:
        """The host of another session on the same server (sharing its connections)."""
        return Host(self.server, session)

    # --- the session ----------------------------------------------------------------------

    async def is_up(self) -> bool:
        """Whether the session exists."""
        return await self.server.has_session(self.session)

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
    ) -> bool:
        """Create the session unless it exists; True if it was created.

        Its first window (``window``) runs ``argv`` (default a shell); ``options`` are
        session user options (``@name``) set on a new session.
        """
        return await self.server.ensure_session(
            self.session, window_name=window, argv=argv, cwd=cwd, options=options
        )

    async def kill(self) -> None:
        """Kill the session; the server goes (socket, config) when it was its last one.

        Raises
        ------
        SessionNotFound
            There is no such session.
        """
        await self.server.kill_session(self.session)

    async def close(self) -> None:
        """Close this process's connections to the server (the agents keep running)."""
        await self.server.close()

    async def tmux(self, *args: str) -> tuple[int, str, str]:
        """Run one read-only tmux query on the server: (exit status, stdout, stderr)."""
        return await self.server.run(*args)

    # --- its agents -----------------------------------------------------------------------

    async def agent_panes(self) -> dict[str, Pane]:
        """The session's agent panes (``@poli_agent``) by agent name, in one listing."""
        return await agent_panes(await self.server.connect(self.session), self.server)

    async def find_agent_pane(self, name: str) -> Pane | None:
        """The pane of agent ``name`` in the session, if it has one (alive or dead)."""
        return (await self.agent_panes()).get(name)

    async def pane(self, pane_id: str) -> Pane | None:
        """A handle on pane ``pane_id`` of any session of the server; None if it is gone."""
        rc, out, _ = await self.server.run(
            "display-message", "-p", "-t", pane_id, "#{session_name}"
        )
        session = out.strip()
        if rc != 0 or not session:
            return None
        return await self.server.pane(session, pane_id)

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
            return await new_window(
                await self.server.connect(self.session),
                self.server,
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

    async def find_or_start(
        self,
        name: str,
        profile: str,
        *,
        argv: Sequence[str] | None,
        cwd: pathlib.Path,
        setting: str,
        ready_timeout: float,
        store: RunStore | None = None,
        policy: ApprovalPolicy | None = None,
    ) -> AgentDriver:
        """The driver of agent ``name``: attached to its live pane, else started in a window.

        The session is created if needed (in ``cwd``). A started agent is ready when this
        returns; an attached one has been looked at once.

        Raises
        ------
        AgentNotFound
            Its program is not on PATH (``setting`` names the key that chooses it).
        AgentExited, AgentTimeout
            It did not come up ready.
        """
        agent_profile = load_profile(profile)
        await self.ensure(cwd=cwd)
        pane = await self.find_agent_pane(name)
        if pane is not None and await pane.is_alive():
            driver = AgentDriver(name, agent_profile, pane, cwd=cwd, store=store, policy=policy)
            await driver.observe()
            return driver
        return await AgentDriver.start(
            name,
            agent_profile,
            argv=argv or None,
            host=self,
            cwd=cwd,
            setting=setting,
            ready_timeout=ready_timeout,
            store=store,
            policy=policy,
        )

    async def stop_agents(self, names: Iterable[str] | None = None) -> list[str]:
        """Kill the process trees of the session's agents (all, or ``names``); who was stopped."""
        found = await self.agent_panes()
        wanted = list(found) if names is None else [n for n in names if n in found]
        for name in wanted:
            await found[name].kill()
        return wanted


def state_dir() -> pathlib.Path:
    """Where politerm keeps per-server files (tmux configs, session locks)."""
    return default_config_dir()


__all__ = ["Host", "Launched", "Pane", "hide_tmux", "state_dir"]
