"""Scale: N idle fake agents in one project beside a working Planner⇄Executer pair.

For each N (10, 50, 200, 500; ``--quick``: 10, 50) a fresh process (so its memory is its
own) on a fresh private tmux server brings up a project of N idle agents (the bundled fake
agent, plain mode) plus PLANNER and EXECUTER (fake agents with a plan/result scenario),
through :meth:`Session.up` as ``poli up`` does, and measures:

bring-up
    Wall time of ``Session.up`` until every agent is ready, and the ``list-panes`` rows
    tmux sent back for it. The baseline, in the same run on the same panes: the lookup
    ``up`` did before (one ``list-panes`` per agent, :func:`find_agent_pane` N times)
    against the one listing it does now (:func:`agent_panes`).
idle
    With the router running over every agent, ``poli status --watch`` and ``poli dash`` open
    in windows of the session and ``poli web`` in its own process with its overview
    connected: CPU seconds over a window (10 s; 30 s from 200 agents) of the router process,
    ``poli web``, the status watcher, the dashboard, the ``tmux -C`` control clients all of
    them run and the tmux servers, each read in nanoseconds from ``/proc/PID/task/*/schedstat``
    (``/proc/PID/stat`` counts whole 10 ms ticks per process, too coarse for ~60 processes
    doing almost nothing); and counts that do not depend on load: tmux commands sent, SQL
    statements run, agent-loop steps taken, per idle second.
views
    ``poli status`` (one-shot) wall time; the web overview's first frame after connecting,
    and the time from one agent's state change in the store to the overview's next frame;
    ``poli dash``'s first paint (from its start to the agents table on the screen of its
    window) and the time from one agent's state change in the store to its row showing the
    new state on that screen.
handoff
    Planner's plan printed → Executer's prompt submitted (ms, from the agents' own logs),
    with the N idle agents beside them.
memory
    RSS of the router process before ``up`` and with the router running; its growth per
    agent is politerm's own memory per idle agent. The tmux server's RSS, and the fake
    agents' own (USS, summed) apart.

Run ``python -m bench.bench_scale [--quick]``. Each N needs about 25 MB of free memory per
fake agent; an N that does not fit in the available memory is skipped and said so. Each N
runs with its own ``HOME`` and XDG directories, so the views see only the bench's project
(not the user's other projects under ``~/.local/state/politerm/projects``).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t

import psutil

from bench._common import (
    FAKEAGENT,
    SESSION,
    Bench,
    Row,
    Stats,
    check,
    print_machine,
    print_table,
    private_server,
    ratio,
)
from bench.bench_loop import (
    TASK_TIMEOUT,
    Handoffs,
    Sizes,
    _agent_argv,
    _write_scenarios,
    run_task_done,
)
from bench.bench_ui import _cpu
from politerm.agents import AgentState, load_profile
from politerm.config import load_config
from politerm.driver import Host
from politerm.engine.loop import templates_for
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.engine.session import Session
from politerm.store import RunStore
from politerm.testing.retry import WaitTimeout, aretry_until
from politerm.tmux import ControlClient, TmuxServer, agent_panes, find_agent_pane, new_window
from politerm.tmux.shards import shard_sockets

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.config import Config
    from politerm.tmux import Pane

FULL_N = (10, 50, 200, 500)
QUICK_N = (10, 50)
MB_PER_AGENT = 25  # a fake agent's own memory (USS) is about 19 MB; what each N must find free
LONG_WINDOW_FROM = 200  # from this N the idle window is 30 s: what is left to see is small
TARGETS = {"bring-up s": 40.0, "idle % of a core": 1.0, "p50 ms": 10.0, "p99 ms": 25.0}
TARGET_RSS_MB = 150.0
#: The views at N rows: first paint <= 1 s, an update <= 200 ms (absent without views).
VIEW_TARGETS = {
    "status once s": 1.0,
    "overview first frame ms": 1000.0,
    "overview update ms": 200.0,
    "dash first paint ms": 1000.0,
    "dash update ms": 200.0,
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one N measures (``profile``: a cProfile file for the router's handoff phase)."""

    n: int
    window: float
    tasks: int
    profile: str = ""
    #: False: no ``status --watch`` and no ``poli web`` beside the router (an A/B of the views).
    views: bool = True
    #: ``[tmux] shard_size``: agents per tmux server (a size above N: one server for all).
    shard_size: int = 50
    #: False: the views without ``poli dash`` (the issue's idle target names status and web).
    dash: bool = True


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


# --- counts that do not depend on load ----------------------------------------------------


class Counts:
    """tmux commands this process sends, SQL statements its store runs, agent-loop steps."""

    def __init__(self) -> None:
        self.tmux: dict[str, int] = {}
        self.sql = 0
        self.steps = 0

    def install(self, store: RunStore) -> None:
        """Count ``store``'s SQL statements from now on (they still run as before)."""
        store._conn.set_trace_callback(self._sql)  # counting, not changing

    def count_steps(self, router: Router) -> None:
        """Count ``router``'s agent-loop steps from now on (they still run as before)."""
        step = router._step

        async def counted(driver: t.Any) -> None:
            self.steps += 1
            await step(driver)

        router._step = counted  # type: ignore[method-assign]

    def _sql(self, _statement: str) -> None:
        self.sql += 1

    def snapshot(self) -> tuple[int, int, int]:
        return sum(self.tmux.values()), self.sql, self.steps


COUNTS = Counts()
_send_lines = ControlClient._send_lines


async def _counting_send(self: ControlClient, lines: Sequence[str]) -> t.Any:
    for line in lines:
        verb = line.split(" ", 1)[0]
        COUNTS.tmux[verb] = COUNTS.tmux.get(verb, 0) + 1
    return await _send_lines(self, lines)


# --- the project ---------------------------------------------------------------------------


def _project(root: pathlib.Path, socket: str, n: int, shard_size: int) -> pathlib.Path:
    _write_scenarios(root, Sizes(tasks=0))
    agents = ""
    for name in ("planner", "executer"):
        (root / name).mkdir(exist_ok=True)
        agents += (
            f"[agents.{name.upper()}]\ncommand = {json.dumps(_agent_argv(root, name))}\n"
            f'profile = "fake-claude"\ncwd = "{name}"\nprimer = false\n\n'
        )
    (root / "idle").mkdir(exist_ok=True)
    for i in range(n):
        argv = [*FAKEAGENT, "--mode", "plain"]
        agents += (
            f"[agents.IDLE{i:03d}]\ncommand = {json.dumps(argv)}\n"
            f'profile = "fake-plain"\ncwd = "idle"\nprimer = false\n\n'
        )
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "{SESSION}"\nshard_size = {shard_size}\n\n'
        f'[store]\npath = "runs.sqlite3"\n\n'
        f"[timeouts]\nplan = {TASK_TIMEOUT}\nexec = {TASK_TIMEOUT}\nready = {60 + n}\n\n" + agents
    )
    return root


# --- one N, in its own process -------------------------------------------------------------


async def _lookups(bench: Bench, names: Sequence[str]) -> dict[str, float]:
    """The pane lookup of ``up``: one listing per agent (before) vs one listing (now)."""
    client = bench.client
    rows0 = COUNTS.tmux.get("list-panes", 0)
    start = time.perf_counter()
    for name in names:
        await find_agent_pane(client, bench.server, name)
    before = time.perf_counter() - start
    listings_before = COUNTS.tmux.get("list-panes", 0) - rows0
    start = time.perf_counter()
    found = await agent_panes(client, bench.server)
    now = time.perf_counter() - start
    check(all(n in found for n in names), "lookup: an agent's pane was not found")
    return {
        "lookup before ms": before * 1000,
        "lookup now ms": now * 1000,
        "listings before": listings_before,
        "pane rows before": listings_before * (len(names) + 1),
    }


async def _status_once(bench: Bench, store: pathlib.Path) -> float:
    argv = [sys.executable, "-m", "politerm", "status", "--socket", bench.socket, "--store"]
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, str(store), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    check(proc.returncode == 0, f"poli status failed: {err.decode(errors='replace')[-300:]}")
    return time.perf_counter() - start


async def _handoffs(
    config: Config, store: RunStore, root: pathlib.Path, tasks: int
) -> tuple[list[float], list[float]]:
    ids = [await run_task_done(store, config, i) for i in range(tasks)]
    logs = Handoffs.read(root)
    delay = load_profile("fake-claude").submit_delay
    return logs.plan_ms(ids, delay), logs.result_ms(ids, delay)


def _agent_processes(panes: Sequence[str], pane_pids: dict[str, int]) -> list[psutil.Process]:
    procs: list[psutil.Process] = []
    for pane in panes:
        pid = pane_pids.get(pane)
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
    return procs


def _agents_uss(procs: Sequence[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_full_info().uss
    return total / 2**20


async def _pane_pids(servers: Sequence[TmuxServer]) -> dict[str, int]:
    """Socket + pane id -> the pane's process id, on every server of the session."""
    pids: dict[str, int] = {}
    for server in servers:
        _, out, _ = await server.run("list-panes", "-a", "-F", "#{pane_id}\t#{pane_pid}")
        for line in out.splitlines():
            pane, _, pid = line.partition("\t")
            pids[server.socket_name + pane] = int(pid)
    return pids


def _shards(bench: Bench) -> list[TmuxServer]:
    """The session's servers: the bench's own, then its shards."""
    return [bench.server, *map(bench.server.sibling, shard_sockets(bench.socket, SESSION))]


async def _server_processes(servers: Sequence[TmuxServer]) -> list[psutil.Process]:
    procs = []
    for server in servers:
        _, out, _ = await server.run("display-message", "-p", "#{pid}")
        procs.append(psutil.Process(int(out.strip())))
    return procs


def _cpus(procs: Sequence[psutil.Process]) -> float:
    return sum(map(_cpu, procs))


async def one(plan: Plan) -> dict[str, t.Any]:
    """Measure one N; every process started here dies with its private tmux server."""
    me = psutil.Process()
    out: dict[str, t.Any] = {"agents": plan.n, "load at start": _load()}
    ControlClient._send_lines = _counting_send  # type: ignore[method-assign]
    async with private_server(f"scale{plan.n}") as bench:
        root = _project(bench.workdir / "proj", bench.socket, plan.n, plan.shard_size)
        config = load_config(root, env={})
        store = RunStore.open(config.store.resolved_path())
        web: _Web | None = None
        try:
            rss0 = me.memory_info().rss
            COUNTS.install(store)
            server = psutil.Process(
                int((await bench.client.cmd("display-message", "-p", "#{pid}"))[0])
            )
            u0 = COUNTS.snapshot()
            cpu_up = [_cpu(me), _cpu(server)]
            start = time.perf_counter()
            host = Host(bench.server, config.tmux.session, shard_size=plan.shard_size)
            agents = await Session(config, store, host).up(resume=True)
            out["bring-up s"] = time.perf_counter() - start
            # CPU seconds do not depend on the load as much as the wall time does.
            out["up router cpu s"] = _cpu(me) - cpu_up[0]
            shards = _shards(bench)
            servers = await _server_processes(shards)
            out["tmux servers"] = len(servers)
            # A shard's server started during up: all of its CPU is up's.
            out["up tmux server cpu s"] = _cpus(servers) - cpu_up[1]
            panes = await host.agent_panes()
            idle = [host.socket_of(p) + p.pane_id for n, p in panes.items() if n.startswith("IDLE")]
            idle_procs = _agent_processes(idle, await _pane_pids(shards))
            out["agent start cpu ms"] = 1000 * sum(map(_cpu, idle_procs)) / max(1, len(idle))
            u1 = COUNTS.snapshot()
            out["up tmux cmds/agent"] = (u1[0] - u0[0]) / len(agents)
            out["up sql/agent"] = (u1[1] - u0[1]) / len(agents)
            out["load after up"] = _load()
            # The lookup of the first server's agents (the one that has all of them unsharded).
            first = [n for n, p in panes.items() if host.socket_of(p) == bench.socket]
            out.update(await _lookups(bench, first))

            router = Router(Routing(config, store, agents, templates=templates_for(config)))
            COUNTS.count_steps(router)
            routing = asyncio.create_task(router.run())

            async def all_ready() -> bool:
                return all(d.state is AgentState.READY for d in router.agents.values())

            await aretry_until(all_ready, 60 + plan.n * 0.2, interval=0.5, what="all ready")
            views: dict[str, int] = {}
            dash: Pane | None = None
            if plan.views:
                watcher = await _watcher(bench, store)
                web = await _web(root)
                views = {"web": web.proc.pid, "status": watcher.pid}
                if plan.dash:
                    dash, views["dash"], first_paint = await _dash(bench, root)
                    out.update(first_paint)
                for pid in views.values():
                    await _settled(psutil.Process(pid))
                out.update(web.first)
            harness = bench.client._proc.pid if bench.client._proc is not None else -1
            cpu = Cpu.of(me.pid, views, [p.pid for p in servers], harness)
            out["control clients"] = len(cpu.parts["clients"])
            # The idle window: CPU and counts.
            r0, c0 = cpu.read(), COUNTS.snapshot()
            t0 = time.monotonic()
            await asyncio.sleep(plan.window)
            wall = time.monotonic() - t0
            r1, c1 = cpu.read(), COUNTS.snapshot()
            used = {part: r1[part] - r0[part] for part in r0}
            out["window s"] = wall
            for part, label in PARTS.items():
                out[f"{label} s"] = used[part]
            out["idle % of a core"] = 100 * sum(used.values()) / wall
            out["tmux cmds/s"] = (c1[0] - c0[0]) / wall
            out["sql/s"] = (c1[1] - c0[1]) / wall
            out["steps/s"] = (c1[2] - c0[2]) / wall
            out["load idle"] = _load()
            out["round trip us"] = await _round_trip_us(bench)
            if web is not None:
                out["overview update ms"] = await web.update(store, "IDLE000")
            if dash is not None:
                out["dash update ms"] = await _dash_update(dash, store, "IDLE000")
            out["status once s"] = await _status_once(bench, store.path)
            out["rss before MB"] = rss0 / 2**20
            out["rss MB"] = me.memory_info().rss / 2**20
            out["tmux server MB"] = sum(p.memory_info().rss for p in servers) / 2**20
            for part in ("status", "web", "dash"):
                out[f"{part} MB"] = _rss_mb(views.get(part))
            h0, k0 = COUNTS.snapshot(), cpu.read()
            profiler = cProfile.Profile() if plan.profile else None
            if profiler is not None:
                profiler.enable()
            plan_ms, result_ms = await _handoffs(config, store, root, plan.tasks)
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(plan.profile)
            k1, h1 = cpu.read(), COUNTS.snapshot()
            for part, label in PARTS.items():
                out[f"{label} ms/task"] = 1000 * (k1[part] - k0[part]) / plan.tasks
            out["tmux cmds/task"] = (h1[0] - h0[0]) / plan.tasks
            out["sql/task"] = (h1[1] - h0[1]) / plan.tasks
            out["steps/task"] = (h1[2] - h0[2]) / plan.tasks
            stats = Stats.of(plan_ms + result_ms)
            out["p50 ms"], out["p99 ms"], out["handoffs"] = stats.p50, stats.p99, stats.n
            out["load after handoffs"] = _load()
            out["agents' own MB (USS)"] = _agents_uss(idle_procs)
            router.stop()
            await routing
        finally:
            if web is not None:
                await web.close()
            store.close()
            for shard in _shards(bench)[1:]:
                with contextlib.suppress(Exception):
                    await shard.kill_server()
    return out


# --- CPU in nanoseconds ---------------------------------------------------------------------

#: The parts of the session whose CPU the idle and handoff tables show, and their labels.
PARTS = {
    "router": "router",
    "web": "web",
    "status": "status",
    "dash": "dash",
    "clients": "control clients",
    "servers": "tmux server",
}


def _cpu_ns(pid: int) -> int:
    """CPU time of ``pid``'s live threads in ns (the first field of each ``schedstat``)."""
    try:
        tasks = list(pathlib.Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    total = 0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


@dataclasses.dataclass(frozen=True)
class Cpu:
    """The session's processes by part (:data:`PARTS`), read in CPU seconds."""

    parts: dict[str, list[int]]

    @classmethod
    def of(cls, router: int, views: dict[str, int], servers: list[int], harness: int) -> Cpu:
        """The router process, each view, their ``tmux -C`` clients and the servers.

        ``harness``: the bench's own control client (not the session's) is left out.
        """
        clients: set[int] = set()
        for root in (router, *views.values()):
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(root).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        argv = child.cmdline()
                        if argv and argv[0].endswith("tmux") and "-C" in argv:
                            clients.add(child.pid)
        clients.discard(harness)
        parts = {part: [views[part]] if part in views else [] for part in PARTS}
        parts.update(router=[router], clients=sorted(clients), servers=servers)
        return cls(parts)

    def read(self) -> dict[str, float]:
        """CPU seconds of each part so far."""
        return {part: sum(map(_cpu_ns, pids)) / 1e9 for part, pids in self.parts.items()}


async def _round_trip_us(bench: Bench, n: int = 300) -> float:
    """p50 of one control-mode command's round trip (µs), one after the other.

    tmux on Linux polls every pane's terminal on each pass of its event loop, and a round
    trip is two passes (read the command, write the reply): this grows with the panes.
    """
    took: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        await bench.client.cmd("display-message", "-p", "x")
        took.append((time.perf_counter() - start) * 1e6)
    return Stats.of(took).p50


def _cpu_of(proc: psutil.Process | None) -> float:
    return 0.0 if proc is None else _cpu(proc)


def _rss_mb(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.Error:
        return 0.0


async def _watcher(bench: Bench, store: RunStore) -> psutil.Process:
    """``poli status --watch`` in a window of the session, as the control window runs it."""
    argv = [
        sys.executable, "-m", "politerm", "status", "--watch", "--socket",
        bench.socket, "--store", str(store.path),
    ]  # fmt: skip
    pane = await bench.window("status", argv)
    lines = await bench.client.cmd("display-message", "-p", "-t", pane.pane_id, "#{pane_pid}")
    return psutil.Process(int(lines[0]))


DASH_SIZE = (200, 50)
"""The dashboard's window (columns, rows): wide enough for the agents table's state column."""


async def _dash(bench: Bench, root: pathlib.Path) -> tuple[Pane, int, dict[str, float]]:
    """``poli dash`` in a window of the session, as a user runs it in the project.

    Returns its pane, its process id and its first paint: ms from the window's start to
    the agents table (first agent row) on its screen, and the CPU ms the dashboard's
    process had used by then (less dependent on the machine's load than the wall time).
    """
    argv = [sys.executable, "-m", "politerm", "dash"]
    start = time.perf_counter()
    pane = await new_window(
        bench.client, bench.server, session=SESSION, name="dash", argv=argv, cwd=root,
        size=DASH_SIZE,
    )  # fmt: skip
    lines = await bench.client.cmd("display-message", "-p", "-t", pane.pane_id, "#{pane_pid}")
    pid = int(lines[0])
    await _on_screen(pane, "IDLE000", "", 120, "the dashboard's agents table")
    first = {
        "dash first paint ms": (time.perf_counter() - start) * 1000,
        "dash first paint cpu ms": _cpu_ns(pid) / 1e6,
    }
    return pane, pid, first


async def _on_screen(pane: Pane, agent: str, state: str, bound: float, what: str) -> None:
    """Until ``agent``'s row on the pane's screen shows ``state`` (any: ``""``)."""
    screen: list[str] = []

    async def shown() -> bool:
        screen[:] = await pane.capture()
        for line in screen:
            words = line.replace("│", " ").split()
            if agent in words and (not state or state in words):
                return True
        return False

    try:
        await aretry_until(shown, bound, interval=0.005, what=what)
    except WaitTimeout as exc:
        last = "\n".join(screen).rstrip()
        check(False, f"{exc}; the screen:\n{last}")


async def _dash_update(pane: Pane, store: RunStore, agent: str) -> float:
    """One agent's state changes in the store: ms until its row on the dashboard shows it.

    Read off the screen every 5 ms (tmux's ``capture-pane``); the row is on the first
    screen of the table (IDLE000 sorts before the rest).
    """
    await _on_screen(pane, agent, AgentState.READY.value, 30, f"{agent} ready on the dashboard")
    start = time.perf_counter()
    store.set_agent_state(agent, AgentState.BUSY.value)
    await _on_screen(pane, agent, AgentState.BUSY.value, 30, f"{agent} busy on the dashboard")
    took = (time.perf_counter() - start) * 1000
    store.set_agent_state(agent, AgentState.READY.value)
    await _on_screen(pane, agent, AgentState.READY.value, 30, f"{agent} ready again")
    return took


@dataclasses.dataclass
class _Web:
    """``poli web`` in its own process, as a user runs it, and its overview websocket."""

    first: dict[str, float]
    socket: t.Any
    proc: asyncio.subprocess.Process

    @property
    def process(self) -> psutil.Process:
        return psutil.Process(self.proc.pid)

    async def update(self, store: RunStore, agent: str) -> float:
        """One agent's state changes in the store: ms until the overview's next frame."""
        with contextlib.suppress(TimeoutError):
            while True:  # drain what is pending
                await asyncio.wait_for(self.socket.recv(), 0.5)
        start = time.perf_counter()
        store.set_agent_state(agent, AgentState.BUSY.value)
        await asyncio.wait_for(self.socket.recv(), 30)
        took = (time.perf_counter() - start) * 1000
        store.set_agent_state(agent, AgentState.READY.value)
        return took

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.socket.close()
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def _web(root: pathlib.Path) -> _Web:
    """Start ``poli web`` on the project and connect its overview."""
    import websockets

    token = "scale-bench-" + os.urandom(8).hex()
    errors = root / "poli-web.stderr"
    with errors.open("wb") as err_file:  # the child keeps its own copy of the descriptor
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "politerm", "web", "--port", "0", "--token", token,
            cwd=root, stdout=subprocess.PIPE, stderr=err_file,
        )  # fmt: skip
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
    port = line.rsplit("127.0.0.1:", 1)[-1].split("/", 1)[0]
    # Its one-line error says why (e.g. no xterm.js where POLI_WEB_ASSETS points).
    why = "" if port.isdigit() else errors.read_text(errors="replace").strip()
    check(port.isdigit(), f"poli web did not say its address: {line!r}; stderr: {why!r}")
    start = time.perf_counter()
    ws = await websockets.connect(f"ws://127.0.0.1:{port}/ws/overview?token={token}")
    await ws.recv()
    first = {"overview first frame ms": (time.perf_counter() - start) * 1000}
    return _Web(first, ws, proc)


async def _settled(watcher: psutil.Process, cap: float = 60.0) -> None:
    """Until the watcher's start-up is over: under 20 ms of CPU in a second (or ``cap``)."""
    deadline = time.monotonic() + cap
    last = _cpu_of(watcher)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = _cpu_of(watcher)
        if now - last < 0.02:
            return
        last = now


# --- the driver: one child process per N ----------------------------------------------------


def _fits(n: int) -> bool:
    return psutil.virtual_memory().available / 2**20 > (n + 2) * MB_PER_AGENT + 2048


def _child(plan: Plan) -> dict[str, t.Any]:
    argv = [
        sys.executable,
        "-m",
        "bench.bench_scale",
        "--one",
        json.dumps(dataclasses.asdict(plan)),
    ]
    # A home of its own: the views list every project under the user's state directory.
    home = pathlib.Path(tempfile.mkdtemp(prefix="poli-bench-home-"))
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
    }
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=1800, check=False, env=env
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if proc.returncode != 0:
        check(False, f"scale N={plan.n}: {proc.stderr[-1500:]}")
    result: dict[str, t.Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(
    quick: bool = False,
    ns: Sequence[int] = (),
    profile: str = "",
    views: bool = True,
    shard_sizes: Sequence[int] = (50,),
    dash: bool = True,
) -> dict[str, list[Row]]:
    """Run every N in its own process and print the tables; return them.

    ``ns`` replaces the default agent counts; with ``profile`` (a directory), each N's
    handoff phase is profiled into ``PROFILE/scale-N.prof`` (cProfile, router process);
    ``views=False`` runs without ``status --watch``, ``poli web`` and ``poli dash`` beside
    the router; ``dash=False`` without ``poli dash`` only.
    Each N runs once per ``shard_sizes`` entry, one after the other (an A/B in one run:
    e.g. 50 and 100000, every agent on one server).
    """
    ns = ns or (QUICK_N if quick else FULL_N)
    results: list[dict[str, t.Any]] = []
    for n in ns:
        if not _fits(n):
            print(f"(N={n} skipped: {psutil.virtual_memory().available / 2**30:.1f} GB available)")
            continue
        for size in shard_sizes:
            name = f"scale-{n}-{size}.prof"
            prof = str(pathlib.Path(profile, name).resolve()) if profile else ""
            window = 5.0 if quick else 30.0 if n >= LONG_WINDOW_FROM else 10.0
            tasks = 5 if quick else 50  # 100 handoffs: a p99 of 30 was nearly their max
            plan = Plan(n, window, tasks, profile=prof, views=views, shard_size=size, dash=dash)
            results.append({"shard size": size, **_child(plan)})
            print(f"(N={n}, shard size {size} measured)")
            sys.stdout.flush()
    tables = _tables(results)
    return tables


def _tables(results: Sequence[dict[str, t.Any]]) -> dict[str, list[Row]]:
    base = results[0] if results else {}
    up = print_table(
        "bring-up: Session.up until every agent is ready; the pane lookup it does",
        [
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "bring-up s": r["bring-up s"],
                "load": r["load after up"],
                "router CPU s": r["up router cpu s"],
                "tmux server CPU s": r["up tmux server cpu s"],
                "agent start CPU ms each": r["agent start cpu ms"],
                "lookup before ms": r["lookup before ms"],
                "lookup now ms": r["lookup now ms"],
                "x lookup": ratio(r["lookup before ms"], r["lookup now ms"]),
                "list-panes before": r["listings before"],
                "list-panes now": 1,
                "tmux cmds/agent": r["up tmux cmds/agent"],
                "sql/agent": r["up sql/agent"],
            }
            for r in results
        ],
    )
    idle = print_table(
        "idle: router + poli web (overview open) + status --watch + poli dash + their tmux -C"
        " clients + tmux servers, CPU s over the window (schedstat, ns)",
        [
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "window s": r["window s"],
                **{f"{label} s": r[f"{label} s"] for label in PARTS.values()},
                "clients": r["control clients"],
                "idle % of a core": r["idle % of a core"],
                "tmux cmds/s": r["tmux cmds/s"],
                "sql/s": r["sql/s"],
                "steps/s": r["steps/s"],
                "tmux round trip us p50": r["round trip us"],
                "load": r["load idle"],
            }
            for r in results
        ],
    )
    views = print_table(
        "views at N rows",
        [
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "poli status s": r["status once s"],
                "overview first frame ms": r.get("overview first frame ms", float("nan")),
                "overview update ms": r.get("overview update ms", float("nan")),
                "dash first paint ms": r.get("dash first paint ms", float("nan")),
                "dash first paint CPU ms": r.get("dash first paint cpu ms", float("nan")),
                "dash update ms": r.get("dash update ms", float("nan")),
            }
            for r in results
        ],
    )
    handoff = print_table(
        "handoff (plan and result hops) beside N idle agents",
        [
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "handoffs": r["handoffs"],
                "p50 ms": r["p50 ms"],
                "p99 ms": r["p99 ms"],
                "x p50 of N=first": ratio(r["p50 ms"], base.get("p50 ms", float("nan"))),
                "sql/task": r["sql/task"],
                "tmux cmds/task": r["tmux cmds/task"],
                "steps/task": r["steps/task"],
                **{f"{label} ms/task": r[f"{label} ms/task"] for label in PARTS.values()},
                "load": r["load after handoffs"],
            }
            for r in results
        ],
    )
    memory = print_table(
        "memory: politerm's own (router process) vs the agents' own",
        [
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "router RSS MB": r["rss MB"],
                "router KB per agent": 1024 * (r["rss MB"] - r["rss before MB"]) / r["agents"],
                "status --watch MB": r["status MB"],
                "poli web MB": r["web MB"],
                "poli dash MB": r["dash MB"],
                "tmux server MB": r["tmux server MB"],
                "tmux KB per agent": 1024 * r["tmux server MB"] / r["agents"],
                "agents' own MB (USS)": r["agents' own MB (USS)"],
                "agent's own MB each": r["agents' own MB (USS)"] / r["agents"],
            }
            for r in results
        ],
    )
    verdict: list[Row] = []
    for r in results:
        for key, limit in {**TARGETS, **VIEW_TARGETS}.items():
            if key not in r:
                continue
            verdict.append(
                {
                    "agents": r["agents"],
                    "shard size": r["shard size"],
                    "servers": r["tmux servers"],
                    "target": f"{key} <= {limit:g}",
                    "measured": float(r[key]),
                    "met": "yes" if float(r[key]) <= limit else "no",
                }
            )
        verdict.append(
            {
                "agents": r["agents"],
                "shard size": r["shard size"],
                "servers": r["tmux servers"],
                "target": f"router RSS MB <= {TARGET_RSS_MB:g}",
                "measured": float(r["rss MB"]),
                "met": "yes" if float(r["rss MB"]) <= TARGET_RSS_MB else "no",
            }
        )
    print_table("scale: targets (issue 25)", verdict)
    return {"bring-up": up, "idle": idle, "views": views, "handoff": handoff, "memory": memory}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        plan = Plan(**json.loads(sys.argv[2]))
        result = asyncio.run(one(plan))
        print(json.dumps(result))
    else:
        import argparse

        parser = argparse.ArgumentParser(prog="python -m bench.bench_scale")
        parser.add_argument("--quick", action="store_true", help="N = 10 and 50 only")
        parser.add_argument("--n", type=int, nargs="+", default=[], help="agent counts")
        parser.add_argument("--profile", default="", help="directory for handoff profiles")
        parser.add_argument(
            "--no-views", action="store_true", help="no status --watch, poli web or poli dash"
        )
        parser.add_argument(
            "--shard-size", type=int, nargs="+", default=[50], help="agents per tmux server"
        )
        parser.add_argument("--no-dash", action="store_true", help="the views without poli dash")
        args = parser.parse_args()
        print_machine()
        main(
            quick=args.quick,
            ns=args.n,
            profile=args.profile,
            views=not args.no_views,
            shard_sizes=args.shard_size,
            dash=not args.no_dash,
        )
