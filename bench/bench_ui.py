"""Dashboard and web monitor: idle cost with N idle agents, and screen-update latency.

idle
    N fake agents (plain mode) sit idle, driven by a router in this process. Over a fixed
    window we take the CPU seconds of politerm (this process: router, and the dashboard or
    the web monitor when open), of its tmux control clients and of the tmux server — first
    without any view, then with ``poli dash`` open (Textual, headless, mirroring one agent),
    then with ``poli web`` serving a connected overview websocket and one live pane. The
    issue's target: with the dashboard open, politerm's idle CPU stays within 2x of without.

latency
    A pane prints ``tick <n> <epoch>`` every 100 ms. The time from the print to the moment
    the line is in xterm.js's buffer in a real browser (playwright + chromium, the
    agent page of ``poli web``) is measured in the page. Side by side, in the same run, a
    capture-poll baseline: ``tmux capture-pane`` every 0.1 s and every 0.4 s (the seed's
    interval), the time until the line first shows in a capture. Target: p99 <= 100 ms.

Run ``python -m bench.bench_ui [--quick]``; ratios are ``baseline / ours``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import sys
import time
import typing as t

import psutil

from bench._common import (
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
from bench.bench_idle import _grow_idle, _register
from politerm.agents import AgentState, load_profile
from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.driver import AgentDriver
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.store import RunStore
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from politerm.tmux import Pane

TARGET_IDLE = 2.0
TARGET_P99_MS = 100.0
CHROMIUM = "/usr/bin/chromium"
# one line: a tmux command argument cannot hold a newline
TICKER = (
    "import time, itertools; "
    "[(print(f'tick {n} {time.time():.6f}', flush=True), time.sleep(0.1)) "
    "for n in itertools.count(1)]"
)
_TICK = re.compile(r"tick (\d+) (\d+\.\d+)")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much one run measures."""

    agents: int
    window: float
    ticks_for: float


QUICK = Sizes(agents=50, window=4.0, ticks_for=6.0)
FULL = Sizes(agents=50, window=10.0, ticks_for=20.0)


def _cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def _tmux_clients(socket: str) -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.Error:
            continue
        if socket in argv and "-C" in argv:
            out.append(child)
    return out


class Meter:
    """CPU seconds of this process, its control-mode clients and the tmux server."""

    def __init__(self, socket: str, server_pid: int) -> None:
        self.socket = socket
        self.server = psutil.Process(server_pid)
        self._clients: dict[int, psutil.Process] = {}

    def sample(self) -> tuple[float, float, float, float]:
        for proc in _tmux_clients(self.socket):
            self._clients.setdefault(proc.pid, proc)
        clients = sum(_cpu(p) for p in self._clients.values())
        return time.process_time(), clients, _cpu(self.server), time.monotonic()


async def _window(meter: Meter, seconds: float) -> dict[str, float]:
    p0, c0, s0, w0 = meter.sample()
    await asyncio.sleep(seconds)
    p1, c1, s1, w1 = meter.sample()
    politerm = (p1 - p0) + (c1 - c0)
    return {"politerm s": politerm, "tmux server s": s1 - s0, "wall": w1 - w0}


async def bench_idle(bench: Bench, sizes: Sizes) -> list[Row]:
    from politerm.ui.dash import DashApp
    from politerm.ui.live import LiveState
    from politerm.ui.web import WebMonitor, new_token, serve
    from politerm.ui.web.serve import bind

    panes: list[Pane] = []
    await _grow_idle(bench, panes, sizes.agents)
    server_pid = int((await bench.client.cmd("display-message", "-p", "#{pid}"))[0])
    meter = Meter(bench.socket, server_pid)
    store = RunStore.open(bench.workdir / "ui-idle.sqlite3")
    _register(store, panes)
    config = Config(
        tmux=TmuxConfig(socket=bench.socket, session=SESSION), store=StoreConfig(path=store.path)
    )
    profile = load_profile("fake-plain")
    idle = {
        f"IDLE{i:03d}": AgentDriver(f"IDLE{i:03d}", profile, p, store=store)
        for i, p in enumerate(panes)
    }
    router = Router(Routing(config, store, idle))
    routing = asyncio.create_task(router.run())
    results: dict[str, dict[str, float]] = {}
    try:
        await asyncio.sleep(1.5)  # not a condition: every agent loop's first look settles
        ready = sum(1 for rt in router.agents.values() if rt.state is AgentState.READY)
        check(ready == len(panes), f"ui idle: {ready} of {len(panes)} agents ready")
        results["router only (no view)"] = await _window(meter, sizes.window)

        import websockets

        with RunStore.open(store.path) as view_store:
            live = LiveState(config, view_store)
            token = new_token()
            monitor = WebMonitor(live, token=token)
            sock = bind("127.0.0.1", 0)
            port = sock.getsockname()[1]
            stop, up = asyncio.Event(), asyncio.Event()
            serving = asyncio.create_task(serve(monitor, sock, stop=stop, started=up.set))
            await asyncio.wait_for(up.wait(), 30)
            base = f"ws://127.0.0.1:{port}"
            pane = panes[0].pane_id.replace("%", "%25")
            async with (
                websockets.connect(f"{base}/ws/overview?token={token}") as ov,
                websockets.connect(f"{base}/ws/pane/{pane}?token={token}") as pv,
            ):
                await ov.recv()
                await pv.recv()
                await pv.recv()
                await asyncio.sleep(1.0)  # not a condition: the first frames settle
                results["router + poli web (overview + one live pane)"] = await _window(
                    meter, sizes.window
                )
            stop.set()
            await serving

        with RunStore.open(store.path) as view_store:
            app = DashApp(config, view_store, agent="IDLE000")
            async with app.run_test(size=(200, 60)) as pilot:

                async def mirrored() -> bool:
                    await pilot.pause()
                    return app.screen_mirror is not None

                await aretry_until(mirrored, 30, what="the dashboard's mirror")
                await asyncio.sleep(1.0)  # not a condition: the first full draw settles
                results["router + poli dash (mirroring one agent)"] = await _window(
                    meter, sizes.window
                )

        results["router only again (views closed)"] = await _window(meter, sizes.window)
    finally:
        router.stop()
        await routing
        store.close()
    base_cpu = results["router only (no view)"]["politerm s"]
    rows: list[Row] = []
    for path, r in results.items():
        rows.append(
            {
                "agents": sizes.agents,
                "path": path,
                "politerm s": r["politerm s"],
                "tmux server s": r["tmux server s"],
                "% of a core": 100 * (r["politerm s"] + r["tmux server s"]) / r["wall"],
                "x of no view": r["politerm s"] / base_cpu if base_cpu > 0 else float("nan"),
            }
        )
    rows = print_table(
        f"idle CPU with {sizes.agents} idle agents, CPU seconds over {sizes.window:g} s", rows
    )
    verdict: list[Row] = [
        {
            "path": r["path"],
            "target": f"politerm CPU <= {TARGET_IDLE:g}x of no view",
            "x of no view": r["x of no view"],
            "met": "yes" if float(r["x of no view"]) <= TARGET_IDLE else "no",
        }
        for r in rows[1:]
    ]
    print_table("ui idle: target", verdict)
    return rows


# --- latency ------------------------------------------------------------------------------


async def _browser_latency(
    bench: Bench, pane: Pane, seconds: float
) -> tuple[list[float], list[float]]:
    from playwright.async_api import async_playwright

    from politerm.ui.live import LiveState
    from politerm.ui.web import WebMonitor, new_token, serve
    from politerm.ui.web.serve import bind

    store = RunStore.open(bench.workdir / "ui-latency.sqlite3")
    config = Config(
        tmux=TmuxConfig(socket=bench.socket, session=SESSION), store=StoreConfig(path=store.path)
    )
    live = LiveState(config, store)
    token = new_token()
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop, up = asyncio.Event(), asyncio.Event()
    monitor = WebMonitor(live, token=token)
    serving = asyncio.create_task(serve(monitor, sock, stop=stop, started=up.set))
    try:
        await asyncio.wait_for(up.wait(), 30)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                # a headless page counts as hidden: keep its timers at full rate
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-timer-throttling",
                    "--disable-renderer-backgrounding",
                    "--disable-backgrounding-occluded-windows",
                ],
            )
            page = await browser.new_page(viewport={"width": 1700, "height": 1000})
            target = pane.pane_id.replace("%", "%25")
            await page.goto(f"http://127.0.0.1:{port}/agent/{target}?token={token}")
            await page.wait_for_function("() => window.poliFrames > 0", timeout=30_000)
            # In the page: after each xterm write, find tick lines not seen before and
            # record now - printed (both clocks are this machine's wall clock).
            await page.evaluate(
                """() => {
                    window.tickSeen = new Set(); window.tickLat = [];
                    const b0 = window.poliTerm.buffer.active;
                    for (let i = 0; i < b0.length; i++) {  // ticks already drawn are old
                        const l = b0.getLine(i);
                        const m = l && /tick (\\d+)/.exec(l.translateToString());
                        if (m) window.tickSeen.add(m[1]);
                    }
                    window.tickArrived = [];
                    window.tickArrivedSeen = new Set(window.tickSeen);
                    const dec = new TextDecoder();
                    window.poliOnMessage = (bytes) => {
                        const now = Date.now();
                        const re = /tick (\\d+) (\\d+\\.\\d+)/g;
                        for (const m of dec.decode(bytes).matchAll(re)) {
                            if (window.tickArrivedSeen.has(m[1])) continue;
                            window.tickArrivedSeen.add(m[1]);
                            window.tickArrived.push(now - parseFloat(m[2]) * 1000);
                        }
                    };
                    window.poliOnFrame = () => {
                        const b = window.poliTerm.buffer.active;
                        const end = b.baseY + b.cursorY;
                        for (let i = Math.max(0, end - 12); i <= end; i++) {
                            const l = b.getLine(i); if (!l) continue;
                            const m = /tick (\\d+) (\\d+\\.\\d+)/.exec(l.translateToString());
                            if (m && !window.tickSeen.has(m[1])) {
                                window.tickSeen.add(m[1]);
                                window.tickLat.push(Date.now() - parseFloat(m[2]) * 1000);
                            }
                        }
                    };
                }"""
            )
            await asyncio.sleep(seconds)
            drawn = await page.evaluate("() => window.tickLat")
            arrived = await page.evaluate("() => window.tickArrived")
            await browser.close()
    finally:
        stop.set()
        await serving
        store.close()
    return [float(x) for x in arrived], [float(x) for x in drawn]


def _poll_latency(bench: Bench, pane: Pane, interval: float, seconds: float) -> list[float]:
    argv = bench.tmux_argv("capture-pane", "-p", "-t", pane.pane_id)
    first = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    seen = {n for n, _ in _TICK.findall(first)}  # already on screen: not news
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        text = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        now = time.time()
        for n, printed in _TICK.findall(text):
            if n not in seen:
                seen.add(n)
                out.append((now - float(printed)) * 1000)
        time.sleep(interval)
    return out


async def bench_latency(bench: Bench, sizes: Sizes) -> list[Row]:
    pane = await bench.window("ticker", [sys.executable, "-c", TICKER])
    ours, drawn = await _browser_latency(bench, pane, sizes.ticks_for)
    poll_fast = await asyncio.to_thread(_poll_latency, bench, pane, 0.1, sizes.ticks_for)
    poll_seed = await asyncio.to_thread(_poll_latency, bench, pane, 0.4, sizes.ticks_for)
    check(len(ours) > 10, f"ui latency: only {len(ours)} ticks reached the browser")
    mine = Stats.of(ours)
    rows: list[Row] = []
    for path, samples in (
        ("capture-pane poll every 0.4 s (seed)", poll_seed),
        ("capture-pane poll every 0.1 s", poll_fast),
        ("poli web: in the page's websocket handler", ours),
        ("poli web: parsed into xterm.js's buffer", drawn),
    ):
        s = Stats.of(samples)
        rows.append(
            {
                "path": path,
                "n": s.n,
                "p50 ms": s.p50,
                "p99 ms": s.p99,
                "max ms": s.max,
                "x p50": ratio(s.p50, mine.p50),
                "x p99": ratio(s.p99, mine.p99),
            }
        )
    rows = print_table("screen update -> browser latency (tick printed every 100 ms)", rows)
    print_table(
        "ui latency: target (arrival in the page)",
        [
            {
                "target": f"p99 <= {TARGET_P99_MS:g} ms",
                "p99 ms": mine.p99,
                "met": "yes" if mine.p99 <= TARGET_P99_MS else "no",
            }
        ],
    )
    return rows


async def run(quick: bool = False) -> dict[str, list[Row]]:
    sizes = QUICK if quick else FULL
    out: dict[str, list[Row]] = {}
    async with private_server("ui") as bench:
        out["latency"] = await bench_latency(bench, sizes)
    async with private_server("ui-idle") as bench:
        out["idle"] = await bench_idle(bench, sizes)
    return out


def main(quick: bool = False) -> dict[str, list[Row]]:
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
