"""Engine benchmarks: capture, delivery and output latency, each against a baseline.

Every baseline is measured in the same run, on the same private tmux server:

capture
    ``await pane.capture()`` over the one control-mode connection, vs one
    ``tmux capture-pane -p -J`` process per capture.
delivery
    ``deliver()`` of 1 KiB, 100 KiB and 1 MiB into the fake agent (claude and codex mode) until
    DELIVERED, with the bytes the agent logged checked by sha256, vs the floor: one
    ``tmux load-buffer`` process plus one ``tmux paste-buffer`` process of the same text.
output latency
    A program in the pane prints ``MARK <round> <i> <monotonic ns>`` lines; we take the time
    from the stamp to the ``%output`` reaching a ControlClient subscriber, vs detecting the
    same marks by polling ``tmux capture-pane`` (one process per poll) every 0.4 s.

Run ``python -m bench.bench_engine [--quick]`` or, with every benchmark, ``python -m bench.run``.
Ratios are ``baseline / ours``: above 1 means politerm is faster than the baseline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
import subprocess
import sys
import time
import typing as t

from bench._common import (
    Bench,
    BenchError,
    Row,
    Stats,
    check,
    cli,
    fakeagent_available,
    now_ns,
    print_table,
    private_server,
    ratio,
)
from politerm.agents import AgentState, load_profile
from politerm.driver import deliver
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    import pathlib

    from politerm.agents import AgentProfile
    from politerm.tmux import Pane


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work one run does (``--quick`` or full)."""

    captures: int
    delivery_reps: int
    marks: int
    mark_gap: float = 0.010
    poll_interval: float = 0.4


QUICK = Sizes(captures=300, delivery_reps=1, marks=200)
FULL = Sizes(captures=2000, delivery_reps=5, marks=1000)
DELIVERY_SIZES = (("1 KiB", 1024), ("100 KiB", 100 * 1024), ("1 MiB", 1024 * 1024))
DELIVERY_MODES = ("claude", "codex")


def _stats_row(name: str, samples_ms: t.Sequence[float], base: Stats) -> Row:
    s = Stats.of(samples_ms)
    return {
        "path": name,
        "n": s.n,
        "mean ms": s.mean,
        "p50 ms": s.p50,
        "p99 ms": s.p99,
        "x mean": ratio(base.mean, s.mean),
        "x p50": ratio(base.p50, s.p50),
        "x p99": ratio(base.p99, s.p99),
    }


# --- capture -----------------------------------------------------------------------------


async def _ready(pane: Pane, profile: AgentProfile, seconds: float = 20.0) -> None:
    async def ready() -> bool:
        return profile.detect(await pane.snapshot()).state is AgentState.READY

    await aretry_until(ready, seconds, interval=0.02, what=f"{profile.name} to be ready")


async def _capture_pane(bench: Bench) -> Pane:
    """A pane with a realistic screen: the fake agent after one exchange, or ``sh`` output."""
    if fakeagent_available():
        profile = load_profile("fake-claude")
        pane = await bench.fake_agent("claude", "capture")
        await _ready(pane, profile)
        prompt = "\n".join(f"context line {i}: please look at module_{i}.py" for i in range(12))
        result = await deliver(pane, prompt, profile)
        check(result.ok, f"capture setup: delivery failed: {result}")
        await _ready(pane, profile)
        return pane
    print("(fake agent not available: capturing a shell that printed 40 lines)")
    pane = await bench.window("capture", ["sh"])
    await pane.paste(b"i=0; while [ $i -lt 40 ]; do echo line $i of output; i=$((i+1)); done\n")

    async def printed() -> bool:
        return any("line 39 of output" in ln for ln in await pane.capture())

    await aretry_until(printed, 10, what="the shell to print 40 lines")
    return pane


def _run_timed(argv: list[str], n: int) -> tuple[list[float], bytes]:
    """Run ``argv`` ``n`` times, one process each as the baselines do; ms each, last stdout."""
    samples: list[float] = []
    out = b""
    for _ in range(n):
        t0 = time.perf_counter_ns()
        out = subprocess.run(argv, capture_output=True, check=True).stdout
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return samples, out


async def bench_capture(bench: Bench, sizes: Sizes) -> list[Row]:
    pane = await _capture_pane(bench)
    argv = bench.tmux_argv("capture-pane", "-p", "-J", "-t", pane.pane_id)
    n = sizes.captures

    for _ in range(20):  # warm up
        await pane.capture()
    _run_timed(argv, 20)

    ours: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await pane.capture()
        ours.append((time.perf_counter_ns() - t0) / 1e6)

    base, out = _run_timed(argv, n)

    # Both paths must read the same screen (the idle screen does not change).
    proc_lines = out.decode().split("\n")
    ctl_lines = await pane.capture()
    check(
        [ln.rstrip() for ln in ctl_lines] == [ln.rstrip() for ln in proc_lines[: len(ctl_lines)]],
        "capture: control mode and capture-pane returned different screens",
    )

    pipelined: list[float] = []
    batch = 50
    for _ in range(max(1, n // batch)):
        t0 = time.perf_counter_ns()
        await asyncio.gather(*(pane.capture() for _ in range(batch)))
        pipelined.append((time.perf_counter_ns() - t0) / 1e6 / batch)

    b = Stats.of(base)
    return print_table(
        f"capture: per capture of a {len(ctl_lines)}-line screen",
        [
            _stats_row("baseline: tmux capture-pane process", base, b),
            _stats_row("politerm: await pane.capture()", ours, b),
            _stats_row(f"politerm: {batch} captures in flight (per capture)", pipelined, b),
        ],
    )


# --- delivery ----------------------------------------------------------------------------


def prompt_text(size: int, seed: int = 0) -> bytes:
    """Exactly ``size`` bytes of prompt: numbered lines, some UTF-8 and tabs, no final LF.

    Examples
    --------
    >>> [len(prompt_text(n)) for n in (1, 1024, 5000)]
    [1, 1024, 5000]
    >>> prompt_text(1024).decode()[:12]
    'task 0 line '
    """
    lines = []
    total = 0
    i = 0
    while total < size + 64:
        if i % 7 == 3:
            line = f"task {seed} line {i}:\tnaïve café → ✓ keep indentation and quotes \"'`$"
        else:
            line = f"task {seed} line {i}: read src/module_{i % 97}.py and fix function f{i}()"
        lines.append(line)
        total += len(line.encode()) + 1
        i += 1
    data = "\n".join(lines).encode()
    # Cut on an ASCII byte so the text stays valid UTF-8, then end on a visible character.
    cut = data[: size - 1]
    while cut and cut[-1] >= 0x80:
        cut = cut[:-1]
    return cut + b"." * (size - len(cut))


def _floor_ms(bench: Bench, sink: Pane, data: bytes) -> float:
    """One ``load-buffer`` process and one ``paste-buffer`` process: the bare paste."""
    t0 = time.perf_counter_ns()
    subprocess.run(
        bench.tmux_argv("load-buffer", "-b", "floor", "-"), input=data, check=True, timeout=60
    )
    subprocess.run(
        bench.tmux_argv("paste-buffer", "-p", "-r", "-d", "-b", "floor", "-t", sink.pane_id),
        check=True,
        timeout=60,
    )
    return (time.perf_counter_ns() - t0) / 1e6


async def _logged_prompt(log: pathlib.Path, index: int) -> dict[str, t.Any]:
    async def found() -> dict[str, t.Any] | None:
        events = [e for e in read_log(log) if e.get("event") == "prompt"]
        return events[index] if len(events) > index else None

    return await aretry_until(found, 30, what=f"prompt #{index + 1} in {log.name}")


async def bench_delivery(bench: Bench, sizes: Sizes) -> list[Row]:
    if not fakeagent_available():
        msg = "delivery needs the fake agent (python -m politerm.testing.fakeagent)"
        raise BenchError(msg)
    # The floor pastes into a raw-mode sink that drains its input, so nothing backs up.
    sink = await bench.window("sink", ["sh", "-c", "stty raw -echo; exec cat >/dev/null"])
    rows: list[Row] = []
    for mode in DELIVERY_MODES:
        profile = load_profile(f"fake-{mode}")
        for label, size in DELIVERY_SIZES:
            ours: list[float] = []
            logged: list[float] = []
            floor: list[float] = []
            paste: list[float] = []
            submits: list[int] = []
            early = 0
            for rep in range(sizes.delivery_reps):
                # A fresh agent each time: an earlier prompt left on screen changes what
                # deliver() sees (see docs/performance.md, "stale paste marker").
                name = f"deliver-{mode}-{size}-{rep}"
                pane = await bench.fake_agent(mode, name)
                data = prompt_text(size, seed=rep)
                await _ready(pane, profile)
                wall0 = time.time()  # the agent stamps its log lines with time.time()
                t0 = time.perf_counter_ns()
                result = await deliver(pane, data, profile)
                t1 = time.perf_counter_ns()
                wall1 = time.time()
                check(
                    result.ok,
                    f"delivery {mode} {label} #{rep + 1}: {result.outcome.value} "
                    f"({result.rule}): {result.evidence}",
                )
                event = await _logged_prompt(bench.log_path(name), 0)
                got = event["text"].encode("utf-8", "surrogateescape")
                want = hashlib.sha256(data).hexdigest()
                check(
                    event["sha256"] == want and hashlib.sha256(got).hexdigest() == want,
                    f"delivery {mode} {label} #{rep + 1}: the agent logged different bytes "
                    f"({event['len']} bytes, sha256 {event['sha256'][:12]}…; sent {len(data)} "
                    f"bytes, sha256 {want[:12]}…)",
                )
                ours.append((t1 - t0) / 1e6)
                logged.append((float(event["ts"]) - wall0) * 1000)
                early += float(event["ts"]) > wall1
                submits.append(result.submits)
                await pane.kill(grace=1.0)
                floor.append(_floor_ms(bench, sink, data))
                t3 = time.perf_counter_ns()
                await sink.paste(data)
                paste.append((time.perf_counter_ns() - t3) / 1e6)
            d, f, p = Stats.of(ours), Stats.of(floor), Stats.of(paste)
            rows.append(
                {
                    "mode": mode,
                    "size": label,
                    "n": d.n,
                    "deliver p50 ms": d.p50,
                    "deliver max ms": d.max,
                    "agent logged p50 ms": Stats.of(logged).p50,
                    "early": early,
                    "submits": max(submits),
                    "sha256": "ok",
                    "floor p50 ms": f.p50,
                    "pane.paste p50 ms": p.p50,
                    "x p50 (floor/deliver)": ratio(f.p50, d.p50),
                }
            )
    await sink.kill(grace=1.0)
    return print_table(
        "delivery: deliver() until DELIVERED vs the bare load-buffer + paste-buffer floor", rows
    )


# --- output latency ----------------------------------------------------------------------

# Prints MARK lines on each Enter; stamps are CLOCK_MONOTONIC, shared by every process.
_MARKER = """\
import os, sys, time
n, gap = int(sys.argv[1]), float(sys.argv[2])
os.write(1, b"MARKER READY\\n")
rnd = 0
for line in sys.stdin:
    rnd += 1
    t0 = time.monotonic()
    for i in range(n):
        delay = t0 + i * gap - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        os.write(1, b"MARK %d %d %d\\n" % (rnd, i, time.monotonic_ns()))
    os.write(1, b"DONE %d\\n" % rnd)
"""
_MARK = re.compile(rb"MARK (\d+) (\d+) (\d+)\r?\n")


async def _marks_via_control(pane: Pane, rnd: int, n: int, timeout: float) -> list[float]:
    """Latency (ms) from each mark's stamp to its ``%output`` reaching our subscriber."""
    latencies: dict[int, float] = {}
    buf = bytearray()
    done = asyncio.Event()

    def on_output(_pane_id: str, data: bytes) -> None:
        arrived = now_ns()
        buf.extend(data)
        end = 0
        for m in _MARK.finditer(buf):
            end = m.end()
            if int(m.group(1)) == rnd:
                latencies.setdefault(int(m.group(2)), (arrived - int(m.group(3))) / 1e6)
        del buf[:end]
        if len(latencies) >= n:
            done.set()

    unsubscribe = pane.client.feeds.subscribe(pane.pane_id, on_output)
    try:
        await pane.send_keys("Enter")
        async with asyncio.timeout(timeout):
            await done.wait()
    finally:
        unsubscribe()
    return list(latencies.values())


def _marks_via_polling(
    argv: list[str], rnd: int, n: int, interval: float, timeout: float
) -> list[float]:
    """Latency (ms) from each mark's stamp to the first capture-pane poll that shows it."""
    latencies: dict[int, float] = {}
    done = f"DONE {rnd}".encode()
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < timeout:
        out = subprocess.run(argv, capture_output=True, check=True).stdout
        seen = now_ns()
        for m in _MARK.finditer(out.replace(b"\n", b"\r\n")):
            if int(m.group(1)) == rnd:
                latencies.setdefault(int(m.group(2)), (seen - int(m.group(3))) / 1e6)
        if done in out:
            break
        tick += 1
        time.sleep(max(0.0, start + tick * interval - time.monotonic()))
    return list(latencies.values())


async def bench_output_latency(bench: Bench, sizes: Sizes) -> list[Row]:
    n, gap = sizes.marks, sizes.mark_gap
    # A control-mode command line cannot carry a newline, so the program goes in a file.
    script = bench.workdir / "marker.py"
    script.write_text(_MARKER)
    pane = await bench.window("marks", [sys.executable, str(script), str(n), str(gap)])

    async def started() -> bool:
        return any("MARKER READY" in ln for ln in await pane.capture())

    await aretry_until(started, 10, what="the mark printer to start")
    timeout = n * gap + 30

    ours = await _marks_via_control(pane, 1, n, timeout)

    # History is captured too, so a mark that scrolled off between two polls still counts.
    argv = bench.tmux_argv("capture-pane", "-p", "-J", "-S", "-400", "-t", pane.pane_id)
    poll = asyncio.create_task(
        asyncio.to_thread(_marks_via_polling, argv, 2, n, sizes.poll_interval, timeout)
    )
    # Not a wait for a condition: the marks start mid-way between two polls.
    await asyncio.sleep(sizes.poll_interval / 2)
    await pane.send_keys("Enter")
    polled = await poll
    await pane.kill(grace=1.0)

    check(len(ours) == n, f"output latency: control mode saw {len(ours)} of {n} marks")
    b = Stats.of(polled)
    rows = [
        _stats_row(f"baseline: capture-pane poll every {sizes.poll_interval:g}s", polled, b),
        _stats_row("politerm: %output to subscriber", ours, b),
    ]
    for row, got in zip(rows, (polled, ours), strict=True):
        row["n"] = f"{len(got)}/{n}"
        row["max ms"] = max(got) if got else float("nan")
    return print_table(f"output latency: {n} marks every {gap * 1000:g} ms, stamp to seen", rows)


# --- entry point -------------------------------------------------------------------------


async def run(quick: bool = False) -> dict[str, list[Row]]:
    sizes = QUICK if quick else FULL
    tables: dict[str, list[Row]] = {}
    async with private_server("engine") as bench:
        tables["capture"] = await bench_capture(bench, sizes)
        tables["delivery"] = await bench_delivery(bench, sizes)
        tables["output latency"] = await bench_output_latency(bench, sizes)
    return tables


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run every engine benchmark and print its tables; return them."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
