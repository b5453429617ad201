"""Loop benchmarks: the Planner⇄Executer handoff and the idle cost of routing, vs the seed.

Both are measured against the seed project's design in the same run, on the same private
tmux server: a loop that spawns one ``tmux capture-pane -p -J`` process per agent every
0.4 s, regex-scans the text for a complete block and pastes it into the recipient
(:class:`PollingRouter`, below).

handoff
    The fake agent (claude mode for both agents, whose profile has no ``submit_delay``) logs
    ``reply`` when a reply finished printing and ``prompt`` when a prompt was submitted, each
    with ``time.time()``. The handoff latency is the Executer's ``prompt`` minus the Planner's
    ``reply`` that held the plan block: screen read, parse, store writes, paste and submit.
    The Executer→Planner hop (result block) is measured the same way. For politerm the time
    until the router recorded the block, and until it confirmed the delivery, come from the
    run store's events.
idle CPU
    N fake agents in plain mode sit idle; over a fixed window we take the CPU seconds of the
    routing process (``time.process_time``), of the tmux clients it uses (politerm: its one
    control-mode client; baseline: every ``capture-pane`` process it spawned, from
    ``RUSAGE_CHILDREN``) and of the tmux server (psutil).

Run ``python -m bench.bench_loop [--quick]`` or, with every benchmark, ``python -m bench.run``.
Ratios are ``baseline / ours``: above 1 means politerm is cheaper or faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import random
import re
import resource
import subprocess
import sys
import threading
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
    cli,
    print_table,
    private_server,
    ratio,
)
from politerm.agents import AgentState, load_profile
from politerm.config import Config, StoreConfig, TmuxConfig, load_config
from politerm.engine.loop import submit, templates_for
from politerm.engine.router import Router
from politerm.engine.session import Session
from politerm.engine.templates import Templates
from politerm.protocol.primer import new_nonce
from politerm.store import RunStore
from politerm.store.models import TaskState
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from politerm.tmux import Pane


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work one run does (``--quick`` or full)."""

    tasks: int
    idle_agents: tuple[int, ...]
    window: float
    poll_interval: float = 0.4
    think_time: float = 0.05


QUICK = Sizes(tasks=10, idle_agents=(10, 50), window=3.0)
FULL = Sizes(tasks=30, idle_agents=(10, 50, 100, 200), window=10.0)
TARGET_P50_MS = 30.0
TARGET_P99_MS = 150.0
TARGET_IDLE_RATIO = 20.0
MODE = "claude"  # fake-claude has submit_delay = 0 for both agents
TASK_TIMEOUT = 30.0


# --- the fake agents' scenarios ----------------------------------------------------------

_IDS = r"(?=.*?TASK_ID=(?P<id>[^\s()]+))(?=.*?\(nonce=(?P<nonce>[0-9a-f]+)\))"


def _block(to: str, typ: str, tag: str, body: str) -> str:
    header = f'{{"to":"{to}","type":"{typ}","id":"{{id}}","nonce":"{{nonce}}"}}'
    return f"Here you go.\n\n[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n[[/POLI:MSG]]\n"


def _rule(match: str, reply: str, think_time: float | None = None) -> str:
    think = "" if think_time is None else f"think_time = {think_time:.3f}\n"
    return f"[[rules]]\nmatch = '(?s){match}{_IDS}'\n{think}reply = '''{reply}'''\n\n"


def _scenarios(sizes: Sizes) -> dict[str, str]:
    head = f'mode = "{MODE}"\nthink_time = {sizes.think_time}\n\n'
    plan = _block("EXECUTER", "plan", "PLAN", "1. Do step {k}.\n2. Report.")
    result = _block("PLANNER", "result", "RESULT", "Did it.")
    # The executer's think time steps through one poll interval with the task number, so
    # its result lands at every phase of a polling loop, as real think times do.
    executer = head + "".join(
        _rule(
            rf"\AYou received a PLANNER plan block:(?=.*?Do step \d*{d}\.)",
            result,
            sizes.think_time + d * sizes.poll_interval / 10,
        )
        for d in range(10)
    )
    planner = (
        head
        + _rule(r"\A\s*EXECUTER replied:", _block("USER", "final", "REPORT", "All done."))
        + _rule(r"\A(?=TASK_ID=)(?=.*?benchmark task (?P<k>\d+))", plan)
    )
    return {"planner": planner, "executer": executer}


def _write_scenarios(root: pathlib.Path, sizes: Sizes) -> dict[str, pathlib.Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, text in _scenarios(sizes).items():
        paths[name] = root / f"{name}.toml"
        paths[name].write_text(text)
    return paths


def _agent_argv(root: pathlib.Path, name: str) -> list[str]:
    return [
        *FAKEAGENT, "--mode", MODE, "--scenario", str(root / f"{name}.toml"),
        "--log", str(root / f"{name}.jsonl"), "--name", name,
    ]  # fmt: skip


# --- handoff latency from the agents' logs -----------------------------------------------

_TASK_ID = re.compile(r"TASK_ID=([^\s()]+)")


@dataclasses.dataclass
class Handoffs:
    """Per task id: when each reply finished printing and each prompt was submitted."""

    plan_printed: dict[str, float] = dataclasses.field(default_factory=dict)
    plan_submitted: dict[str, float] = dataclasses.field(default_factory=dict)
    result_printed: dict[str, float] = dataclasses.field(default_factory=dict)
    result_submitted: dict[str, float] = dataclasses.field(default_factory=dict)
    executer_prompts: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, root: pathlib.Path) -> Handoffs:
        """Pair the Planner's and the Executer's events by the task id in each prompt."""
        out = cls()
        for agent in ("planner", "executer"):
            prompt_of: dict[int, tuple[str, str]] = {}
            for e in read_log(root / f"{agent}.jsonl"):
                if e["event"] == "prompt":
                    m = _TASK_ID.search(e["text"])
                    if m is None:
                        continue
                    tid = m.group(1)
                    kind = "task" if e["text"].startswith("TASK_ID=") else "other"
                    prompt_of[e["n"]] = (kind, tid)
                    if agent == "executer":
                        out.plan_submitted.setdefault(tid, e["ts"])
                        out.executer_prompts[tid] = out.executer_prompts.get(tid, 0) + 1
                    elif kind == "other":
                        out.result_submitted.setdefault(tid, e["ts"])
                elif e["event"] == "reply" and e["n"] in prompt_of:
                    kind, tid = prompt_of[e["n"]]
                    if agent == "executer":
                        out.result_printed.setdefault(tid, e["ts"])
                    elif kind == "task":
                        out.plan_printed.setdefault(tid, e["ts"])
        return out

    def plan_ms(self, ids: Sequence[str], submit_delay: float) -> list[float]:
        """Planner's plan block printed → Executer's prompt submitted, in ms."""
        return _diffs(self.plan_printed, self.plan_submitted, ids, submit_delay)

    def result_ms(self, ids: Sequence[str], submit_delay: float) -> list[float]:
        """Executer's result block printed → Planner's prompt submitted, in ms."""
        return _diffs(self.result_printed, self.result_submitted, ids, submit_delay)


def _diffs(
    start: dict[str, float], end: dict[str, float], ids: Sequence[str], minus: float
) -> list[float]:
    return [(end[i] - start[i] - minus) * 1000 for i in ids if i in start and i in end]


# --- the seed's design: poll capture-pane, regex-scan, paste -----------------------------

# A complete block as it shows on a screen: header line, body, closing line (indented or not).
BLOCK_RE = re.compile(
    r"\[\[POLI:MSG (\{[^\n]*\})\]\][ \t]*\n(.*?)\n[ \t●⏺]*\[\[/POLI:MSG\]\]", re.DOTALL
)
_TAG_RE = re.compile(r"\A\s*<(\w+)>\s*\n(.*)\n\s*</\1>\s*\Z", re.DOTALL)


class PollingRouter:
    """The seed project's router: one ``tmux capture-pane`` process per agent per tick.

    It forwards every complete block it has not seen yet (by id, nonce and type) to the agent
    named in its ``to`` with ``load-buffer`` + ``paste-buffer`` + ``send-keys Enter``, each a
    tmux process; a block to anyone else ends its task.
    """

    def __init__(self, tmux_argv: Callable[..., list[str]], panes: dict[str, str]) -> None:
        self.tmux_argv = tmux_argv
        self.panes = panes
        self.templates = Templates()
        self.seen: set[tuple[str, str, str]] = set()
        self.finished: set[str] = set()
        self.polls = 0
        self.blocks = 0

    def capture(self, pane_id: str) -> str:
        argv = self.tmux_argv("capture-pane", "-p", "-J", "-t", pane_id)
        self.polls += 1
        return subprocess.run(argv, capture_output=True, check=True).stdout.decode(
            "utf-8", "replace"
        )

    def paste(self, pane_id: str, text: str) -> None:
        buffer = f"seed-{new_nonce()}"
        run = subprocess.run
        run(self.tmux_argv("load-buffer", "-b", buffer, "-"), input=text.encode(), check=True)
        paste = ("paste-buffer", "-p", "-r", "-d", "-b", buffer, "-t", pane_id)
        run(self.tmux_argv(*paste), check=True)
        run(self.tmux_argv("send-keys", "-t", pane_id, "Enter"), check=True)

    def start_task(self, task_id: str, request: str, to: str = "PLANNER") -> None:
        self.paste(
            self.panes[to],
            self.templates.render("task", msg_id=task_id, nonce=new_nonce(), request=request),
        )

    def scan(self, sender: str, screen: str) -> None:
        for m in BLOCK_RE.finditer(screen):
            try:
                header = json.loads(m.group(1))
                key = (str(header["id"]), str(header["nonce"]), str(header["type"]))
            except (ValueError, KeyError, TypeError):
                continue
            if key in self.seen:
                continue
            self.seen.add(key)
            self.blocks += 1
            self.forward(sender, header, _body(m.group(2)))

    def forward(self, sender: str, header: dict[str, t.Any], body: str) -> None:
        to = str(header.get("to", "")).upper()
        if to not in self.panes:
            self.finished.add(str(header["id"]))
            return
        template = "plan" if header["type"] == "plan" else "result"
        text = self.templates.render(
            template, msg_id=str(header["id"]), nonce=new_nonce(), body=body, sender=sender
        )
        self.paste(self.panes[to], text)

    def tick(self) -> None:
        for name, pane_id in self.panes.items():
            self.scan(name, self.capture(pane_id))

    def run(self, interval: float, until: Callable[[], bool], timeout: float) -> bool:
        """Poll every ``interval`` until ``until()``; False on timeout."""
        start = time.monotonic()
        n = 0
        while not until():
            if time.monotonic() - start > timeout:
                return False
            self.tick()
            n += 1
            time.sleep(max(0.0, start + n * interval - time.monotonic()))
        return True


def _body(raw: str) -> str:
    lines = [ln.lstrip(" \t●⏺") for ln in raw.split("\n")]
    text = "\n".join(lines)
    m = _TAG_RE.match(text)
    return m.group(2) if m else text


# --- handoff: politerm -------------------------------------------------------------------


@dataclasses.dataclass
class HandoffRun:
    """One design's handoff samples (ms)."""

    plan: list[float]
    result: list[float]
    recorded: list[float] = dataclasses.field(default_factory=list)
    confirmed: list[float] = dataclasses.field(default_factory=list)


def _project(root: pathlib.Path, socket: str, sizes: Sizes) -> pathlib.Path:
    _write_scenarios(root, sizes)
    agents = ""
    for name in ("planner", "executer"):
        (root / name).mkdir(exist_ok=True)
        agents += (
            f"[agents.{name.upper()}]\ncommand = {json.dumps(_agent_argv(root, name))}\n"
            f'profile = "fake-{MODE}"\ncwd = "{name}"\nprimer = false\n\n'
        )
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "{SESSION}"\n\n'
        f'[store]\npath = "runs.sqlite3"\n\n'
        f"[timeouts]\nplan = {TASK_TIMEOUT}\nexec = {TASK_TIMEOUT}\nready = 30\n\n" + agents
    )
    return root


async def handoff_ours(bench: Bench, sizes: Sizes) -> HandoffRun:
    root = _project(bench.workdir / "ours", bench.socket, sizes)
    config = load_config(root, env={})
    store = RunStore.open(config.store.resolved_path())
    try:
        # The bench session already exists: "resume" reuses it instead of making a new one.
        agents = await Session(config, store, server=bench.server).up(resume=True)
        router = Router(config, store, agents, templates=templates_for(config))
        stop = threading.Event()
        routing = asyncio.create_task(router.run(until=stop.is_set))
        ids: list[str] = []
        try:
            for i in range(sizes.tasks):
                task = submit(store, config, f"handoff benchmark task {i}")
                ids.append(task.id)

                async def settled(tid: str = task.id) -> bool:
                    got = store.get_task(tid)
                    return got is not None and got.state not in (
                        TaskState.PENDING, TaskState.PLANNING, TaskState.EXECUTING,
                    )  # fmt: skip

                await aretry_until(settled, TASK_TIMEOUT, interval=0.02, what=f"task {task.id}")
                final = store.get_task(task.id)
                check(
                    final is not None and final.state is TaskState.DONE,
                    f"handoff (politerm): task {task.id} ended {final and final.state}: "
                    f"{final and final.error}",
                )
        finally:
            stop.set()
            await routing
        logs = Handoffs.read(root)
        for tid in ids:
            check(
                logs.executer_prompts.get(tid) == 1,
                f"handoff (politerm): the executer got {logs.executer_prompts.get(tid)} "
                f"prompts for task {tid}, not 1",
            )
        delay = load_profile(f"fake-{MODE}").submit_delay
        run = HandoffRun(logs.plan_ms(ids, delay), logs.result_ms(ids, delay))
        for tid in ids:
            printed = logs.plan_printed.get(tid)
            if printed is None:
                continue
            for e in store.list_events(task_id=tid, limit=100):
                if e.kind == "block" and e.agent == "PLANNER" and e.data.get("type") == "plan":
                    run.recorded.append((e.ts - printed) * 1000)
                if e.kind == "delivered" and e.agent == "EXECUTER":
                    run.confirmed.append((e.ts - printed - delay) * 1000)
        for pane in (p for _, p in agents.values()):
            await pane.kill(grace=1.0)
        return run
    finally:
        store.close()


# --- handoff: the seed's design ----------------------------------------------------------


async def handoff_baseline(bench: Bench, sizes: Sizes) -> HandoffRun:
    root = bench.workdir / "seed"
    _write_scenarios(root, sizes)
    profile = load_profile(f"fake-{MODE}")
    panes: dict[str, str] = {}
    started: list[Pane] = []
    for name in ("planner", "executer"):
        pane = await bench.window(f"seed-{name}", _agent_argv(root, name))
        started.append(pane)
        panes[name.upper()] = pane.pane_id

        async def ready(p: Pane = pane) -> bool:
            return profile.detect(await p.snapshot()).state is AgentState.READY

        await aretry_until(ready, 30, interval=0.05, what=f"the seed's {name} to be ready")
    seed = PollingRouter(bench.tmux_argv, panes)

    def run_tasks() -> list[str]:
        stop = threading.Event()
        poller = threading.Thread(
            target=seed.run, args=(sizes.poll_interval, stop.is_set, 3600.0), daemon=True
        )
        poller.start()
        rng = random.Random(7)
        ids = []
        try:
            for i in range(sizes.tasks):
                # Tasks arrive at any phase of the poll loop, as they do for a real router.
                time.sleep(rng.uniform(0.0, sizes.poll_interval))
                tid = f"S{i:04d}-{new_nonce()[:4]}"
                ids.append(tid)
                seed.start_task(tid, f"handoff benchmark task {i}")
                deadline = time.monotonic() + TASK_TIMEOUT
                while tid not in seed.finished:
                    check(
                        time.monotonic() < deadline,
                        f"handoff (seed): task {tid} not finished within {TASK_TIMEOUT:g}s",
                    )
                    time.sleep(0.01)
        finally:
            stop.set()
            poller.join()
        return ids

    ids = await asyncio.to_thread(run_tasks)
    logs = Handoffs.read(root)
    for tid in ids:
        check(
            logs.executer_prompts.get(tid) == 1,
            f"handoff (seed): the executer got {logs.executer_prompts.get(tid)} prompts for {tid}",
        )
    delay = profile.submit_delay
    for pane in started:
        await pane.kill(grace=1.0)
    return HandoffRun(logs.plan_ms(ids, delay), logs.result_ms(ids, delay))


def _handoff_rows(sizes: Sizes, ours: HandoffRun, seed: HandoffRun) -> list[Row]:
    rows: list[Row] = []
    for hop, mine, base in (
        ("P→E plan", ours.plan, seed.plan),
        ("E→P result", ours.result, seed.result),
    ):
        b, o = Stats.of(base), Stats.of(mine)
        for path, s in ((f"seed: poll every {sizes.poll_interval:g}s", b), ("politerm", o)):
            rows.append(
                {
                    "hop": hop,
                    "path": path,
                    "n": s.n,
                    "p50 ms": s.p50,
                    "p99 ms": s.p99,
                    "max ms": s.max,
                    "x p50": ratio(b.p50, s.p50),
                    "x p99": ratio(b.p99, s.p99),
                }
            )
    return rows


async def bench_handoff(bench: Bench, sizes: Sizes) -> list[Row]:
    ours = await handoff_ours(bench, sizes)
    seed = await handoff_baseline(bench, sizes)
    check(len(ours.plan) == sizes.tasks, f"handoff: {len(ours.plan)} of {sizes.tasks} paired")
    check(len(seed.plan) == sizes.tasks, f"handoff (seed): {len(seed.plan)} of {sizes.tasks}")
    rows = print_table(
        f"handoff: block printed → prompt submitted, {sizes.tasks} tasks, fake agents in "
        f"{MODE} mode (submit_delay 0)",
        _handoff_rows(sizes, ours, seed),
    )
    plan = Stats.of(ours.plan)
    split: list[Row] = [
        {
            "politerm P→E": "block recorded in the store",
            "p50 ms": Stats.of(ours.recorded).p50,
            "p99 ms": Stats.of(ours.recorded).p99,
        },
        {"politerm P→E": "prompt submitted (agent log)", "p50 ms": plan.p50, "p99 ms": plan.p99},
        {
            "politerm P→E": "delivery confirmed (store)",
            "p50 ms": Stats.of(ours.confirmed).p50,
            "p99 ms": Stats.of(ours.confirmed).p99,
        },
    ]
    print_table("handoff: where politerm's P→E time goes (from the plan block printed)", split)
    verdict: list[Row] = [
        {
            "target": f"P→E p{pct} <= {target:g} ms",
            "measured ms": got,
            "met": "yes" if got <= target else f"no (+{got - target:.0f} ms)",
        }
        for pct, target, got in ((50, TARGET_P50_MS, plan.p50), (99, TARGET_P99_MS, plan.p99))
    ]
    print_table("handoff: targets", verdict)
    return rows


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
    router = Router(config, store, {f"IDLE{i:03d}": (profile, p) for i, p in enumerate(panes)})
    stop = threading.Event()
    routing = asyncio.create_task(router.run(until=stop.is_set))
    try:
        # Not a condition to wait for: every agent loop takes its first look, then idles.
        await asyncio.sleep(1.0)
        ready = sum(1 for rt in router.agents.values() if rt.state is AgentState.READY)
        check(ready == len(panes), f"idle (politerm): {ready} of {len(panes)} agents ready")
        before = meter.sample()
        await asyncio.sleep(window)
        return meter.sample() - before
    finally:
        stop.set()
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


# --- entry point -------------------------------------------------------------------------


def _load(when: str) -> None:
    # Other work on the machine moves these figures more than anything measured here.
    one, five, _ = os.getloadavg()
    print(f"\n(load average {when}: {one:.2f} over 1 min, {five:.2f} over 5 min)")
    sys.stdout.flush()


async def run(quick: bool = False) -> dict[str, list[Row]]:
    sizes = QUICK if quick else FULL
    tables: dict[str, list[Row]] = {}
    _load("before the handoff benchmark")
    async with private_server("loop") as bench:
        tables["handoff"] = await bench_handoff(bench, sizes)
    _load("before the idle benchmark")
    async with private_server("idle") as bench:
        tables["idle"] = await bench_idle(bench, sizes)
    _load("at the end")
    return tables


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the loop benchmarks and print their tables; return them."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
