"""Bring real agent CLIs up in a politerm session on a per-test tmux server, and down again.

A :class:`Rig` is one test's project: a ``poli.toml`` naming the agents (each with its own
scratch home and workdir, seeded by :func:`tests.realcli.clis.prepare`: opencode's with the
plugin dependencies installed once into the cache, so that no start waits on the npm
registry), the run store and the :class:`Session`. :meth:`Rig.close` takes the session
down and asserts that every process of every agent is gone: the pane's whole tree, and
anything else still running with the agent's scratch ``HOME`` in its environment (a daemon
that slipped away).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import time
import typing as t

import psutil

from politerm._internal.proctree import process_tree
from politerm.agents.approval import ApprovalPolicy, Decision, Verdict, get_pending
from politerm.agents.state import AgentState
from politerm.config import load_config
from politerm.engine.session import Session
from politerm.protocol import BlockParser
from politerm.store import RunStore
from politerm.testing.retry import WaitTimeout, aretry_until
from tests.realcli.clis import Options, Spec, prepare

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.config import Config
    from politerm.protocol.block import Block
    from politerm.terminal import Snapshot
    from politerm.testing.mockllm import MockLLM
    from politerm.tmux.pane import Pane
    from tests.realcli.install import Installed

T = t.TypeVar("T")

# Bounds on the waits (seconds): generous for a loaded CI machine, never open-ended.
READY = 90.0
REPLY = 60.0
GONE = 20.0


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """One agent of a rig: which CLI, how it is set up, extra arguments."""

    cli: str
    options: Options = dataclasses.field(default_factory=Options)
    args: tuple[str, ...] = ()
    profile: str | None = None
    hooks: bool = True
    place: str | None = None
    """Agents with the same place share one scratch home and workdir (default: the name)."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    """Added to the recipe's environment."""


@dataclasses.dataclass
class Agent:
    """A running agent: its launch spec, profile and pane."""

    name: str
    spec: Spec
    profile: AgentProfile
    pane: Pane
    store: RunStore | None = None
    """The rig's store: a wait that times out shows its latest events."""

    async def snapshot(self) -> Snapshot:
        return await self.pane.snapshot()

    async def state(self) -> AgentState:
        return self.profile.detect(await self.pane.snapshot()).state

    async def lines(self) -> list[str]:
        """The screen with its scrollback (the screen alone for full-screen CLIs)."""
        snap = await self.pane.snapshot()
        if snap.alternate_screen:
            return list(snap.lines)
        return await self.pane.capture_history()

    async def wait(
        self, fn: t.Callable[[], t.Awaitable[T | bool | None]], what: str, seconds: float = REPLY
    ) -> T:
        """:func:`aretry_until`; when it times out the message shows what the agent was
        at: its screen, what it reads as, and the store's latest events and open question."""
        try:
            return await aretry_until(fn, seconds, interval=0.1, what=what)
        except WaitTimeout as exc:
            msg = f"{exc}\n{await self.explain()}"
            raise WaitTimeout(msg) from None

    async def explain(self) -> str:
        """The agent's screen, its reading and (with a store) the events and its question."""
        snap = await self.pane.snapshot()
        screen = "\n".join(ln.rstrip() for ln in snap.lines if ln.strip())
        reading = self.profile.detect(snap)
        out = f"{self.name} reads {reading.state.value} ({reading.rule}):\n{screen}"
        if self.store is not None:
            out += "\n" + store_story(self.store, self.name)
        return out

    async def wait_state(self, *states: AgentState, seconds: float = REPLY) -> AgentState:
        async def check() -> AgentState | None:
            state = await self.state()
            return state if state in states else None

        names = "/".join(s.value for s in states)
        return await self.wait(check, f"{self.name} to be {names}", seconds)

    async def wait_block(self, parser: BlockParser | None = None) -> Block:
        """The first tagged block the screen shows (echoed prompts are ignored)."""
        p = parser or BlockParser(detect_echo=True, settle=True)
        found: list[Block] = []

        async def check() -> bool:
            found.extend(p.scan_screen(await self.lines()))
            return bool(found)

        await self.wait(check, f"a tagged block from {self.name}")
        return found[0]

    async def answer_approval(self, policy: ApprovalPolicy) -> Verdict:
        """Answer the tool-permission question on screen by ``policy``, as the router does."""
        snap = await self.pane.snapshot()
        request = self.profile.approval_request(snap)
        assert request is not None, f"{self.name}: no approval question on screen"
        verdict = policy.decide(request)
        assert verdict.decision is not None, verdict.reason
        spec = self.profile.approval
        keys = spec.approve if verdict.decision is Decision.APPROVE else spec.deny
        # Like the router: a key that reaches the CLI before its question listens is lost,
        # so press again (bounded) while the same question stays on screen.
        for _ in range(3):
            await self.pane.send_keys(*keys)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                if self.profile.approval_request(await self.pane.snapshot()) is None:
                    return verdict
                await self.pane.wait_output(0.25)
        return verdict


@dataclasses.dataclass
class Rig:
    """One test's politerm project with real agents."""

    root: pathlib.Path
    config: Config
    store: RunStore
    session: Session
    specs: dict[str, Spec]
    agents: dict[str, Agent] = dataclasses.field(default_factory=dict)

    def agent(self, name: str) -> Agent:
        return self.agents[name]

    async def up(
        self,
        *,
        primers: bool = False,
        resume: bool = False,
        say: t.Callable[[str], None] = lambda _line: None,
    ) -> dict[str, Agent]:
        started = await self.session.up(primers=primers, resume=resume, on_event=say)
        panes = await self.session.host.agent_panes()
        self.agents = {
            name: Agent(name, self.specs[name], driver.profile, panes[name], self.store)
            for name, driver in started.items()
        }
        return self.agents

    async def close(self) -> None:
        """Take everything down and assert that no agent process survived."""
        procs: dict[int, psutil.Process] = {}
        try:
            for agent in self.agents.values():
                with contextlib.suppress(Exception):
                    for proc in process_tree((await agent.pane.info()).pid):
                        procs[proc.pid] = proc
            await self.session.down()
        finally:
            await self.session.host.server.close()
            self.store.close()
        homes = {str(spec.home) for spec in self.specs.values()}

        def survivors() -> list[str]:
            left = [p for p in procs.values() if _running(p)]
            left += [p for p in _with_home(homes) if p.pid not in procs]
            return [_describe(p) for p in left]

        async def gone() -> bool:
            return not survivors()

        with contextlib.suppress(AssertionError):
            await aretry_until(gone, GONE, what="agent processes to exit")
        left = survivors()
        for proc in procs.values():  # don't leak into the next test, whatever happened
            with contextlib.suppress(psutil.Error):
                proc.kill()
        assert not left, f"agent processes still running after `poli down`: {left}"


def written(path: pathlib.Path) -> t.Callable[[], t.Awaitable[bool]]:
    """A check for :meth:`Agent.wait`: ``path`` holds a whole line.

    The agents' tools write with ``echo … > path``: the shell creates the file before echo
    writes it, so a file that merely exists can still be empty (seen in CI: opencode).
    """

    async def check() -> bool:
        try:
            return path.read_text().endswith("\n")
        except FileNotFoundError:
            return False

    return check


def store_story(store: RunStore, key: str, last: int = 40) -> str:
    """The store's ``last`` events (time, kind, agent, detail) and ``key``'s open question."""
    events = store.list_events(limit=last)
    t0 = events[0].ts if events else 0.0
    lines = [f"  +{e.ts - t0:7.2f}s {e.kind} [{e.agent}] {e.detail}" for e in events]
    pending = get_pending(store, key)
    asked = "none" if pending is None else repr(pending)
    return f"last {len(events)} events:\n" + "\n".join(lines) + f"\n{key}'s question: {asked}"


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _with_home(homes: set[str]) -> list[psutil.Process]:
    """Processes whose environment has one of ``homes`` as ``HOME`` (ours only)."""
    out = []
    me = os.getuid()
    for proc in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["uids"] is None or proc.info["uids"].real != me:
                continue
            if proc.environ().get("HOME") in homes and _running(proc):
                out.append(proc)
    return out


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return str(proc.pid)


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def write_rig(
    root: pathlib.Path,
    socket: str,
    llm: MockLLM,
    installed: Installed,
    agents: dict[str, AgentSpec],
    *,
    plan_timeout: float = 120,
    exec_timeout: float = 120,
    extra: str = "",
) -> Rig:
    """Write the project and open it (nothing is started yet; see :meth:`Rig.up`)."""
    root.mkdir(parents=True, exist_ok=True)
    specs: dict[str, Spec] = {}
    toml = (
        f'[tmux]\nsocket = "{socket}"\nsession = "t"\nwidth = 200\nheight = 50\n\n'
        '[store]\npath = "runs.sqlite3"\n\n'
        f"[timeouts]\nplan = {plan_timeout}\nexec = {exec_timeout}\nready = {READY}\n\n" + extra
    )
    for name, a in agents.items():
        base = root / (a.place or name).lower()
        binary = installed.bins[a.cli]
        spec = prepare(a.cli, binary, llm, base / "home", base / "work", a.options, a.profile)
        argv = [*spec.argv, *a.args]
        specs[name] = spec = dataclasses.replace(spec, argv=argv, env={**spec.env, **a.env})
        toml += (
            f"[agents.{name}]\ncommand = {json.dumps(argv)}\n"
            f"profile = {_toml_str(spec.profile)}\n"
            f"cwd = {_toml_str(str(spec.workdir))}\nprimer = false\n"
            f"hooks = {json.dumps(a.hooks)}\n"
            f"[agents.{name}.env]\n"
            + "".join(f"{k} = {_toml_str(v)}\n" for k, v in spec.env.items())
            + "\n"
        )
    (root / "poli.toml").write_text(toml)
    config = load_config(root, env={})
    # Only the agents written here (the built-in PLANNER/EXECUTER defaults are fake agents).
    config = config.model_copy(
        update={"agents": {n: a for n, a in config.agents.items() if n in agents}}
    )
    store = RunStore.open(config.store.resolved_path())
    return Rig(root, config, store, Session(config, store), specs)
