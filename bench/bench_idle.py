"""Idle cost of routing: the router and tmux with N idle agents, vs the seed, in one run.

N fake agents in plain mode sit idle; over a fixed window we take the CPU seconds of the
routing process (``time.process_time``), of the tmux clients it uses (politerm: its one
control-mode client; baseline: every ``capture-pane`` process it spawned, from
``RUSAGE_CHILDREN``) and of the tmux server (psutil).

Run ``python -m bench.bench_idle [--quick]``; ratios are ``baseline / ours``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import resource
import sys
import time
import typing as t

import psutil

from bench._common import (
    FAKEAGENT,
    SESSION,
    Bench,
    Row,
    check,
    cli,
    print_table,
    private_server,
    ratio,
)
from bench._seed import PollingRouter
from politerm.agents import AgentState, load_profile
from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.driver import AgentDriver
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.store import RunStore
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.tmux import Pane


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much one run measures (``--quick`` or full)."""

    idle_agents: tuple[int, ...]
    window: float
    poll_interval: float = 0.4
    session_agents: tuple[int, ...] = (10, 50, 200)


QUICK = Sizes(idle_agents=(10, 50), window=3.0, session_agents=(10, 50))
FULL = Sizes(idle_agents=(10, 50, 100, 200), window=10.0)
TARGET_IDLE_RATIO = 20.0
TARGET_SESSION_PCT = 2.0


# --- idle CPU ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CpuSample:
    """CPU seconds so far: the routing process, its tmux clients and the tmux server."""

    router: float
    clients: float
    server: float
    wall: float

    def __sub__(self, other: CpuSample) -> CpuSample:
        return CpuSample(
            self.router - other.router,
            self.clients - other.clients,
            self.server - other.server,
            self.wall - other.wall,
        )

    @property
    def total(self) -> float:
        return self.router + self.clients + self.server


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class CpuMeter:
    """Reads the CPU counters of this process, its tmux clients and the tmux server."""

    def __init__(self, server_pid: int, control_pid: int) -> None:
        self.server = psutil.Process(server_pid)
        self.control = psutil.Process(control_pid)

    def sample(self) -> CpuSample:
        # Spawned capture-pane clients are waited for, so they land in RUSAGE_CHILDREN.
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return CpuSample(
            router=time.process_time(),
            clients=kids.ru_utime + kids.ru_stime + _cpu(self.control),
            server=_cpu(self.server),
            wall=time.monotonic(),
        )


def _control_pid(socket: str) -> int:
    """The pid of this process's control-mode ``tmux -C`` client on ``socket``."""
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            argv = child.cmdline()
            if socket in argv and "-C" in argv:
                return child.pid
    msg = f"no tmux -C child on socket {socket}"
    raise RuntimeError(msg)


async def _grow_idle(bench: Bench, panes: list[Pane], n: int) -> None:
    """Start fake agents in plain mode until there are ``n``; wait until each is up."""
    root = bench.workdir / "idle"
    root.mkdir(exist_ok=True)
    new: list[pathlib.Path] = []
    for i in range(len(panes), n):
        log = root / f"idle-{i:03d}.jsonl"
        argv = [*FAKEAGENT, "--mode", "plain", "--log", str(log), "--name", f"idle-{i:03d}"]
        panes.append(await bench.window(f"idle-{i:03d}", argv))
        new.append(log)

    async def started() -> bool:
        return all(p.exists() and '"event": "start"' in p.read_text("ascii") for p in new)

    await aretry_until(started, 30 + n * 0.5, interval=0.25, what=f"{n} idle agents to start")
    # Not a condition to wait for: the last starters' first screens must be drawn and idle.
    await asyncio.sleep(1.0)


async def _idle_ours(bench: Bench, panes: list[Pane], meter: CpuMeter, window: float) -> CpuSample:
    profile = load_profile("fake-plain")
    store = RunStore.open(bench.workdir / "idle" / f"idle-{len(panes)}.sqlite3")
    config = Config(
        tmux=TmuxConfig(socket=bench.socket, session=SESSION),
        store=StoreConfig(path=store.path),
    )
    # An idle router has no task, so it needs no PLANNER or EXECUTER among its agents.
    idle = {
        f"IDLE{i:03d}": AgentDriver(f"IDLE{i:03d}", profile, p, store=store)
        for i, p in enumerate(panes)
    }
    router = Router(Routing(config, store, idle))
    routing = asyncio.create_task(router.run())
    try:
        # Not a condition to wait for: every agent loop takes its first look, then idles.
        await asyncio.sleep(1.0)
        ready = sum(1 for rt in router.agents.values() if rt.state is AgentState.READY)
        check(ready == len(panes), f"idle (politerm): {ready} of {len(panes)} agents ready")
        before = meter.sample()
        await asyncio.sleep(window)
        return meter.sample() - before
    finally:
        router.stop()
        await routing
        store.close()


def _idle_seed(
    bench: Bench, panes: list[Pane], meter: CpuMeter, sizes: Sizes
) -> tuple[CpuSample, int]:
    seed = PollingRouter(bench.tmux_argv, {f"IDLE{i:03d}": p.pane_id for i, p in enumerate(panes)})
    seed.tick()  # warm-up: the first poll of every pane
    before, polls = meter.sample(), seed.polls
    end = time.monotonic() + sizes.window
    seed.run(sizes.poll_interval, lambda: time.monotonic() >= end, sizes.window + 60)
    used = meter.sample() - before
    check(seed.blocks == 0, f"idle (seed): {seed.blocks} blocks on idle screens")
    return used, seed.polls - polls


async def bench_idle(bench: Bench, sizes: Sizes) -> list[Row]:
    server_pid = int((await bench.client.cmd("display-message", "-p", "#{pid}"))[0])
    meter = CpuMeter(server_pid, _control_pid(bench.socket))
    panes: list[Pane] = []
    rows: list[Row] = []
    for n in sizes.idle_agents:
        await _grow_idle(bench, panes, n)
        ours = await _idle_ours(bench, panes, meter, sizes.window)
        seed, polls = await asyncio.to_thread(_idle_seed, bench, panes, meter, sizes)
        nominal = n * sizes.window / sizes.poll_interval
        for path, s in ((f"seed: poll every {sizes.poll_interval:g}s", seed), ("politerm", ours)):
            rows.append(
                {
                    "agents": n,
                    "path": path,
                    "router s": s.router,
                    "tmux clients s": s.clients,
                    "tmux server s": s.server,
                    "total s": s.total,
                    "% of a core": 100 * s.total / s.wall,
                    "x router": ratio(seed.router, s.router),
                    "x total": ratio(seed.total, s.total),
                    # A seed that cannot keep up polls less and so costs less: scale it to
                    # the rate it was meant to keep.
                    "x total, seed at 0.4 s": ratio(seed.total * nominal / max(polls, 1), s.total),
                    "seed polls": f"{polls}/{nominal:.0f}" if s is seed else "",
                }
            )
        print(f"({n} idle agents measured)")
        sys.stdout.flush()
    rows = print_table(
        f"idle CPU: N idle fake agents (plain mode), CPU seconds over {sizes.window:g} s",
        rows,
    )
    verdict: list[Row] = [
        {
            "agents": r["agents"],
            "target": f"politerm total <= 1/{TARGET_IDLE_RATIO:g} of the seed",
            "x total": r["x total"],
            "met": "yes" if float(r["x total"]) >= TARGET_IDLE_RATIO else "no",
        }
        for r in rows
        if r["path"] == "politerm"
    ]
    print_table("idle CPU: target", verdict)
    return rows


# --- a whole idle session: router + the control window's live status -------------------


def _register(store: RunStore, panes: Sequence[Pane]) -> None:
    """Record the idle agents in the store, so the status views show every one of them."""
    with store.batch():
        for i, pane in enumerate(panes):
            store.upsert_agent(
                f"IDLE{i:03d}",
                session=SESSION,
                pane_id=pane.pane_id,
                command="fakeagent --mode plain",
                cwd=".",
                profile="fake-plain",
                resume_command=None,
            )
            store.set_agent_state(f"IDLE{i:03d}", AgentState.READY.value)


async def _watcher(bench: Bench, name: str, argv: Sequence[str]) -> tuple[Pane, psutil.Process]:
    pane = await bench.window(name, argv)
    pid = int(
        (await bench.client.cmd("display-message", "-p", "-t", pane.pane_id, "#{pane_pid}"))[0]
    )
    return pane, psutil.Process(pid)


async def _session_idle(
    bench: Bench,
    panes: list[Pane],
    meter: CpuMeter,
    window: float,
    watcher_argv: Sequence[str],
    label: str,
) -> tuple[CpuSample, float]:
    """CPU of the router (this process), a status watcher window and tmux, over ``window``."""
    profile = load_profile("fake-plain")
    store = RunStore.open(bench.workdir / "idle" / f"session-{label}-{len(panes)}.sqlite3")
    _register(store, panes)
    config = Config(
        tmux=TmuxConfig(socket=bench.socket, session=SESSION),
        store=StoreConfig(path=store.path),
    )
    idle = {
        f"IDLE{i:03d}": AgentDriver(f"IDLE{i:03d}", profile, p, store=store)
        for i, p in enumerate(panes)
    }
    router = Router(Routing(config, store, idle))
    routing = asyncio.create_task(router.run())
    argv = [*watcher_argv, str(store.path)]
    watch_pane, watcher = await _watcher(bench, f"status-{label}-{len(panes)}", argv)
    try:
        await _settled(watcher, label)
        check(watcher.is_running(), f"session idle ({label}): the status watcher exited")
        before, w0 = meter.sample(), _cpu(watcher)
        await asyncio.sleep(window)
        return meter.sample() - before, _cpu(watcher) - w0
    finally:
        router.stop()
        await routing
        await watch_pane.kill()
        store.close()


async def _settled(watcher: psutil.Process, label: str, cap: float = 30.0) -> None:
    """Wait until the watcher's start-up (imports, the first read of every screen, the first
    full draw) is over: under 20 ms of CPU in a second, or ``cap`` seconds (a poller never
    gets there)."""
    deadline = time.monotonic() + cap
    last = _cpu(watcher)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = _cpu(watcher)
        if now - last < 0.02:
            return
        last = now
    print(f"(session idle, {label}: the watcher still busy after {cap:g} s; measuring anyway)")


def _ours_argv(bench: Bench) -> list[str]:
    # The control window's command (engine.session._control_argv); the store path is last.
    return [
        sys.executable, "-m", "politerm", "status", "--watch", "--socket", bench.socket,
        "--store",
    ]  # fmt: skip


async def bench_session_idle(bench: Bench, sizes: Sizes) -> list[Row]:
    server_pid = int((await bench.client.cmd("display-message", "-p", "#{pid}"))[0])
    meter = CpuMeter(server_pid, _control_pid(bench.socket))
    panes: list[Pane] = []
    rows: list[Row] = []
    # Run as a script: the window's working directory is the scratch dir, not the repo.
    seed_argv = [sys.executable, str(pathlib.Path(__file__).with_name("_oldstatus.py"))]
    for n in sizes.session_agents:
        await _grow_idle(bench, panes, n)
        seed, seed_w = await _session_idle(bench, panes, meter, sizes.window, seed_argv, "seed")
        ours, ours_w = await _session_idle(
            bench, panes, meter, sizes.window, _ours_argv(bench), "ours"
        )
        for path, s, w in (
            ("status --watch polling 0.5 s (seed)", seed, seed_w),
            ("politerm: events only", ours, ours_w),
        ):
            total = s.total + w
            rows.append(
                {
                    "agents": n,
                    "path": path,
                    "router s": s.router,
                    "watcher s": w,
                    "tmux server s": s.server,
                    "total s": total,
                    "% of a core": 100 * total / s.wall,
                    "x watcher": ratio(seed_w, w),
                    "x total": ratio(seed.total + seed_w, total),
                }
            )
        print(f"({n} idle agents measured with a status watcher)")
        sys.stdout.flush()
    rows = print_table(
        f"session idle: router + status --watch + tmux, CPU s over {sizes.window:g} s",
        rows,
    )
    ours_rows = [r for r in rows if str(r["path"]).startswith("politerm")]
    verdict: list[Row] = [
        {
            "agents": r["agents"],
            "target": f"whole session <= {TARGET_SESSION_PCT:g} % of a core",
            "% of a core": r["% of a core"],
            "met": "yes" if float(r["% of a core"]) <= TARGET_SESSION_PCT else "no",
        }
        for r in ours_rows
    ]
    print_table("session idle: target", verdict)
    return rows


async def run(quick: bool = False) -> dict[str, list[Row]]:
    sizes = QUICK if quick else FULL
    tables: dict[str, list[Row]] = {}
    async with private_server("idle") as bench:
        tables["idle"] = await bench_idle(bench, sizes)
    async with private_server("session") as bench:
        tables["session"] = await bench_session_idle(bench, sizes)
    return tables


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the idle benchmarks and print their tables; return them."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
