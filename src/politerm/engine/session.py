"""Bringing a Planner⇄Executer session up, finding it again, and taking it down."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.resources
import logging
import os
import pathlib
import shlex
import typing as t

from politerm._internal.pidlock import PidLock
from politerm.agents.profile import AgentProfile
from politerm.driver import AgentDriver, Host, check_program, state_dir
from politerm.driver.launch import agent_env, agent_profile
from politerm.driver.records import AgentRecords
from politerm.driver.sessionagent import (
    launch_session_agent,
    session_driver,
    stop_session_agents,
)
from politerm.driver.startline import StartLine
from politerm.engine.placement import here_config
from politerm.engine.resume import resume_work
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.errors import HookError, RoutingError, SessionNotFound
from politerm.hooks.channel import channel_path, hooks_dir_for, remove_hooks_dir
from politerm.hooks.install import GEMINI_HOME_ENV, gemini_home_path, hook_cli
from politerm.project import PROJECT_OPTION, STORE_OPTION

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.driver.receipts import Receipts
    from politerm.store import RunStore
    from politerm.tmux.pane import Pane

Drivers = dict[str, AgentDriver]

log = logging.getLogger(__name__)


def kept_records(
    config: Config, name: str, profile: AgentProfile, session: str = ""
) -> AgentRecords:
    """Where agent ``name`` of this session keeps its own records (hook channel, transcript).

    ``session`` is the conversation id its journal rows recorded (its hooks' newest wins).
    """
    acfg = config.agents[name]
    channel: pathlib.Path | None = channel_path(hooks_dir_for(config), name)
    if channel is None or not channel.is_file():
        channel = None
    cwd = pathlib.Path(acfg.cwd).expanduser().resolve()
    env = agent_env(name, acfg, profile)
    if channel is not None and hook_cli(profile.name, acfg.argv()) == "gemini":
        env.setdefault(GEMINI_HOME_ENV, str(gemini_home_path(channel)))
    return AgentRecords.find(name, profile.transcript, cwd, env, channel, session)


def builtin_primer(name: str, contract: str = "politerm") -> str:
    """The built-in primer text for an agent role (PLANNER, EXECUTER, or any other).

    The ``poliseed`` contract has its own primers: they show the original's block shape.
    """
    base = importlib.resources.files("politerm.engine") / "primers"
    path = base / f"{name.lower()}.md"
    if contract != "politerm" and (base / f"{contract}-{name.lower()}.md").is_file():
        path = base / f"{contract}-{name.lower()}.md"
    if not path.is_file():
        path = base / "agent.md"
    return path.read_text()


class Session:
    """The agents of one politerm session on the private tmux server.

    Parameters
    ----------
    config
        Socket, session name, agents and timeouts. With ``[fleet]``, the agents hosted on
        other nodes are left to them.
    store
        The run store; agents and their panes are recorded there.
    host
        Where the agents run (default: the configuration's tmux server and session).
    """

    def __init__(self, config: Config, store: RunStore, host: Host | None = None) -> None:
        # In a fleet, only the agents this machine's router drives (engine/placement.py).
        self.config = here_config(config)[0]
        config = self.config
        self.store = store
        self.host = host or Host.of(config)
        self.name = self.host.session

    async def is_up(self) -> bool:
        """Whether the tmux session exists."""
        return await self.host.is_up()

    async def up(
        self,
        *,
        resume: bool = False,
        primers: bool = True,
        on_event: t.Callable[[str], None] | None = None,
    ) -> Drivers:
        """Create the session and start every configured agent, ready for prompts.

        With ``resume``, an existing session is reused, agents whose panes are gone or dead
        are restarted with their resume arguments, and what died with them is put back in
        flight (:func:`~politerm.engine.resume.resume_work`). A resume holds the session's
        router lock: no router may route while it settles the store.

        Raises
        ------
        RoutingError
            The session is already up (without ``resume``), or a router is routing it (with
            ``resume``).
        AgentTimeout, AgentExited
            An agent did not come up ready; the message names it and shows its screen.
        """
        say = on_event or (lambda _msg: None)
        exists = await self.is_up()
        if exists and not resume:
            msg = (
                f"session {self.name!r} is already up on socket {self.config.tmux.socket!r}; "
                "use `poli down` first, or `poli up --resume`"
            )
            raise RoutingError(msg)
        lock = RouterLock(self.config.tmux.socket, self.name)
        if resume and not lock.acquire():
            msg = (
                f"a router (pid {lock.holder()}) is routing session {self.name!r}: stop it "
                "(Ctrl-C) before `poli up --resume`, which routes the resumed tasks itself"
            )
            raise RoutingError(msg)
        try:
            return await self._up(exists=exists, resume=resume, primers=primers, say=say)
        finally:
            lock.release()

    async def _up(
        self, *, exists: bool, resume: bool, primers: bool, say: t.Callable[[str], None]
    ) -> Drivers:
        # Every program is checked before anything is created.
        for name, acfg in self.config.agents.items():
            env = {**agent_profile(acfg).env, **acfg.env}
            check_program(acfg.argv(), env, setting=f"agents.{name}.command", cwd=acfg.cwd)
        if not exists:
            await self.host.ensure(
                argv=_control_argv(self.store.path, self.config.tmux.socket),
                # poli status --all names every project's session and directory.
                options={
                    PROJECT_OPTION: str(self.config.project.root),
                    STORE_OPTION: str(self.store.path),
                },
            )
            say(f"session {self.name} created on socket {self.config.tmux.socket}")
        try:
            return await self._start_agents(resume=resume, primers=primers, say=say)
        except BaseException:
            if not exists:
                # A half-started session is not left behind: its agents and panes go.
                with contextlib.suppress(Exception):
                    await self.down()
            raise

    async def _start_agents(
        self, *, resume: bool, primers: bool, say: t.Callable[[str], None]
    ) -> Drivers:
        drivers: Drivers = {}
        restarted: list[str] = []  # ran before: started again with their resume arguments
        respawned: list[str] = []  # a new process where one ran in this session before
        records: dict[str, AgentRecords] = {}  # what the dead ones wrote down themselves
        receipts: dict[str, Receipts] = {}  # of the ones started now, from their launch on
        found = await self.host.agent_panes()  # one listing per server, not one per agent
        # Many agents spread evenly over the servers they need (driver/host.py).
        self.host.plan(len(self.config.agents), found)
        line = StartLine()  # agents whose CLI must start alone wait for the one before
        for name, acfg in self.config.agents.items():
            pane = found.get(name)
            if pane is not None and await pane.is_alive():
                drivers[name] = session_driver(self.config, name, pane, store=self.store)
                say(f"{name}: already running in {pane.pane_id}")
                continue
            profile = agent_profile(acfg)
            if pane is not None or self.store.get_agent(name) is not None:
                respawned.append(name)
                # Located now: the new process may begin a new transcript of its own.
                recorded = self.store.journal_conversation(name)
                records[name] = kept_records(self.config, name, profile, recorded)
            extra: list[str] = []
            # An agent that ran before gets its resume arguments, to keep its context.
            if resume and self.store.get_agent(name) is not None:
                extra = self._resume_args(name, profile, records[name].session, say)
                restarted.append(name)
            start = functools.partial(self._launch, name, extra, pane, receipts, say)
            before = line.defer(profile, name, start)
            if before is not None:
                say(f"{name}: starts once {before} is ready (profile {profile.name}: start_alone)")
                continue
            drivers[name] = await start()
        # The drivers wait (dialogs, their session receipts) and prime; the deferred ones
        # start in their turn.
        ready = self.config.timeouts.ready
        try:
            await line.wait_ready(drivers, lambda d: d.wait_ready(ready, say=say))
            drivers = {n: drivers[n] for n in self.config.agents if n in drivers}
            self.store.sync()  # the rows and ready states above, in one fsync
            if primers:
                primed = [d for d in drivers.values() if d.name not in restarted]
                await asyncio.gather(*(self._prime(d, say) for d in primed))
                self.store.sync()
        finally:
            # Their watchers stop; a driver reading them again starts its own.
            for rc in receipts.values():
                await rc.close()
        if resume:
            # A router that does not run: it applies an answer found in a record as it
            # would apply one read on screen.
            router = Router(Routing(self.config, self.store, drivers))
            resume_work(self.store, self.config, respawned, say, records=records, router=router)
        return drivers

    async def _launch(
        self,
        name: str,
        extra: list[str],
        pane: Pane | None,
        receipts: dict[str, Receipts],
        say: t.Callable[[str], None],
    ) -> AgentDriver:
        """Launch agent ``name`` (not waited for) and return its driver; said and kept."""
        launched = await launch_session_agent(
            self.config, self.store, self.host, name, extra_args=extra, replace=pane, say=say
        )
        if launched.receipts is not None:
            receipts[name] = launched.receipts
        say(f"{name}: started {shlex.join(launched.argv)} in {launched.term.pane_id}")
        return session_driver(
            self.config, name, launched.term, store=self.store, receipts=launched.receipts
        )

    def _resume_args(
        self, name: str, profile: AgentProfile, session: str, say: t.Callable[[str], None]
    ) -> list[str]:
        """The arguments that give ``name`` its own conversation back, said and recorded."""
        configured = self.config.agents[name].resume_args
        if configured is not None:
            say(f"{name}: resuming with the configured resume_args {shlex.join(configured)}")
            return list(configured)
        cwd = pathlib.Path(self.config.agents[name].cwd).expanduser().resolve()
        history = next(iter(profile.history_env(name, cwd).values()), "")
        args, which = profile.resume_argv(session, history)
        say(f"{name}: resuming {which}")
        self.store.add_event("resume", agent=name, detail=f"{shlex.join(args)}: {which}")
        return args

    async def attach(self) -> Drivers:
        """Find the running agents of an existing session (after a router restart).

        Raises
        ------
        SessionNotFound
            When the session is not up.
        """
        if not await self.is_up():
            msg = (
                f"no session {self.name!r} on socket {self.config.tmux.socket!r}: "
                "run `poli up` (or `poli up --resume` after a crash)"
            )
            raise SessionNotFound(msg)
        drivers: Drivers = {}
        found = await self.host.agent_panes()
        for name in self.config.agents:
            pane = found.get(name)
            if pane is None:
                msg = f"agent {name} has no pane in session {self.name!r}: run `poli up --resume`"
                raise SessionNotFound(msg)
            drivers[name] = session_driver(self.config, name, pane, store=self.store)
        return drivers

    async def down(self) -> list[str]:
        """Kill every agent's process tree and the session; return what was stopped.

        The session is over: its hooks directory (the agents' receipts and their CLIs'
        session settings, kept while it lived for a resume to read) is removed too.
        """
        # Every server of the session: its first one may have died before the others.
        stopped = await self._stop_all() if await self.host.up_anywhere() else []
        try:
            remove_hooks_dir(hooks_dir_for(self.config))
        except HookError as exc:
            log.warning("poli down: %s", exc)
        return stopped

    async def _stop_all(self) -> list[str]:
        stopped = await stop_session_agents(self.config, self.store, self.host)
        # The last session takes the server, its socket file and its config with it.
        await self.host.kill()
        RouterLock(self.host.socket, self.name).discard()
        return stopped

    async def _prime(self, driver: AgentDriver, say: t.Callable[[str], None]) -> None:
        primer = self.config.agents[driver.name].primer
        if primer is False:
            return
        text = (
            pathlib.Path(primer).read_text()
            if isinstance(primer, (str, os.PathLike))
            else builtin_primer(driver.name, self.config.routing.contract)
        )
        await driver.prime(text, timeout=self.config.timeouts.ready)
        say(f"{driver.name}: primer delivered")


def _control_argv(store: pathlib.Path, socket: str) -> list[str]:
    # Window 0 shows the live status of this session's store to anyone who attaches.
    import sys

    status = [sys.executable, "-m", "politerm", "status", "--watch", "--store", str(store)]
    return [*status, "--socket", socket]


class RouterLock(PidLock):
    """One router per tmux session: an exclusive ``flock`` keyed by socket and session.

    The lock belongs to the tmux session, not to a store: two routers with different
    stores can never drive one session's agents. It lives beside the server's generated
    config (``directory``, default the user state dir).
    """

    def __init__(self, socket: str, session: str, directory: pathlib.Path | None = None) -> None:
        base = directory if directory is not None else state_dir()
        super().__init__(base / f"router-{socket}-{session}.lock")


__all__ = ["Drivers", "RouterLock", "Session", "builtin_primer"]
