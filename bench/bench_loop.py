"""Loop benchmark: the Planner⇄Executer handoff, vs the seed.

Measured against the seed project's design in the same run, on the same private tmux
server: a loop that spawns one ``tmux capture-pane -p -J`` process per agent every 0.4 s,
regex-scans the text for a complete block and pastes it into the recipient
(:class:`bench._seed.PollingRouter`). The idle cost is :mod:`bench.bench_idle`.

handoff
    The fake agent (claude mode for both agents, whose profile has no ``submit_delay``) logs
    ``reply`` when a reply finished printing and ``prompt`` when a prompt was submitted, each
    with ``time.time()``. The handoff latency is the Executer's ``prompt`` minus the Planner's
    ``reply`` that held the plan block: screen read, parse, store writes, paste and submit.
    The Executer→Planner hop (result block) is measured the same way. For politerm the time
    until the router recorded the block, and until it confirmed the delivery, come from the
    run store's events.

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
import sys
import threading
import time
import typing as t

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
from bench._seed import PollingRouter
from bench._trace import PathTrace
from politerm.agents import AgentState, load_profile
from politerm.config import load_config
from politerm.driver import Host
from politerm.engine.loop import submit, templates_for
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.engine.session import Session
from politerm.protocol.primer import new_nonce
from politerm.store import RunStore
from politerm.store.models import TaskState
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.config import Config
    from politerm.tmux import Pane


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work one run does (``--quick`` or full)."""

    tasks: int
    poll_interval: float = 0.4
    think_time: float = 0.05


QUICK = Sizes(tasks=10)
FULL = Sizes(tasks=30)
TRACED_TASKS = 10
TARGET_P50_MS = 8.0
TARGET_P99_MS = 20.0
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
    def read(cls, root: pathlib.Path, executer_root: pathlib.Path | None = None) -> Handoffs:
        """Pair the Planner's and the Executer's events by the task id in each prompt.

        ``executer_root``: where the Executer's log is, when not beside the Planner's (a
        fleet node of its own).
        """
        out = cls()
        for agent in ("planner", "executer"):
            prompt_of: dict[int, tuple[str, str]] = {}
            where = executer_root if agent == "executer" and executer_root else root
            for e in read_log(where / f"{agent}.jsonl"):
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


# --- handoff: politerm -------------------------------------------------------------------


@dataclasses.dataclass
class HandoffRun:
    """One design's handoff samples (ms)."""

    plan: list[float]
    result: list[float]
    recorded: list[float] = dataclasses.field(default_factory=list)
    confirmed: list[float] = dataclasses.field(default_factory=list)
    #: CPU time of the routing thread per task (ms): the router, and the bench's own poll.
    cpu_per_task: float = 0.0


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


async def run_task_done(store: RunStore, config: Config, i: int) -> str:
    """Submit benchmark task ``i`` to the running router, wait until it is DONE; its id."""
    task = submit(store, config, f"handoff benchmark task {i}")

    async def settled() -> bool:
        got = store.get_task(task.id)
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
    return task.id


async def handoff_ours(bench: Bench, sizes: Sizes, trace: PathTrace | None = None) -> HandoffRun:
    """politerm's router over two fake agents; with ``trace``, its path stamped too."""
    name = "ours" if trace is None else "traced"
    root = _project(bench.workdir / name, bench.socket, sizes)
    config = load_config(root, env={})
    store = RunStore.open(config.store.resolved_path())
    try:
        # The bench session already exists: "resume" reuses it instead of making a new one.
        agents = await Session(config, store, Host(bench.server, config.tmux.session)).up(
            resume=True
        )
        router = Router(Routing(config, store, agents, templates=templates_for(config)))
        ids: list[str] = []
        stack = contextlib.ExitStack()
        if trace is not None:
            trace.name_panes({d.terminal_name: agent for agent, d in agents.items()})
            stack.enter_context(trace.wrapped())
        routing = asyncio.create_task(router.run())
        cpu_start = time.thread_time()
        try:
            for i in range(sizes.tasks):
                ids.append(await run_task_done(store, config, i))
        finally:
            cpu_used = time.thread_time() - cpu_start
            router.stop()
            await routing
            stack.close()
        logs = Handoffs.read(root)
        if trace is not None:
            for agent in ("planner", "executer"):
                events = [(e["ts"], e["event"]) for e in read_log(root / f"{agent}.jsonl")]
                trace.add_log(agent.upper(), events)
            trace.starts = [logs.plan_printed[i] for i in ids if i in logs.plan_printed]
        for tid in ids:
            check(
                logs.executer_prompts.get(tid) == 1,
                f"handoff (politerm): the executer got {logs.executer_prompts.get(tid)} "
                f"prompts for task {tid}, not 1",
            )
        delay = load_profile(f"fake-{MODE}").submit_delay
        run = HandoffRun(logs.plan_ms(ids, delay), logs.result_ms(ids, delay))
        run.cpu_per_task = cpu_used / max(1, sizes.tasks) * 1000
        for tid in ids:
            printed = logs.plan_printed.get(tid)
            if printed is None:
                continue
            for e in store.list_events(task_id=tid, limit=100):
                if e.kind == "block" and e.agent == "PLANNER" and e.data.get("type") == "plan":
                    run.recorded.append((e.ts - printed) * 1000)
                if e.kind == "delivered" and e.agent == "EXECUTER":
                    run.confirmed.append((e.ts - printed - delay) * 1000)
        for driver in agents.values():
            await driver.kill(grace=1.0)
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
    print_table(
        "handoff: routing CPU (thread time of the router's thread while the tasks ran, per "
        "task: two handoffs, the task's start and its end; the bench's 20 ms poll included)",
        [{"politerm": "routing CPU per task", "ms": ours.cpu_per_task}],
    )
    trace = PathTrace()
    await handoff_ours(bench, Sizes(tasks=TRACED_TASKS), trace)
    print_table(
        f"handoff: P→E step by step ({TRACED_TASKS} more tasks, traced: the stamps cost a few "
        "µs each; router CPU = the routing thread's CPU time in the step)",
        trace.segments(trace.starts),
    )
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
    _load("at the end")
    return tables


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the loop benchmarks and print their tables; return them."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
