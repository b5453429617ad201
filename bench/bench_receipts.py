"""Cost of a receipt: the hook command per agent event, and how soon the driver sees it.

An agent CLI runs politerm's hook command on every event it reports (Gemini CLI waits for
it), so its cost is what the hooks add to each turn. Measured against a baseline taken in
the same run: a bare ``python -I -c pass`` (the interpreter start-up any Python hook pays).
Then the wake-up latency: from the hook process's exit to the channel's event firing in a
waiting reader (``watchfiles``), against the same wait on a plain ``asyncio`` timer tick of
0.25 s (the screen-confirm loop's re-check interval, which a reader without the event
would rely on).

Run ``python -m bench.bench_receipts [--quick]``; ratios are ``baseline / ours`` (the CPU
row is per run, user + system time of the child processes; the CPU row's p50 is the mean).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from bench._common import Row, Stats, check, cli, print_table, ratio
from politerm.hooks.channel import HookChannel, create_channel
from politerm.hooks.install import emit_argv

PAYLOAD = json.dumps({"prompt": "Please make a plan. (nonce=0123ab)", "session_id": "s"})
RECHECK = 0.25  # the delivery confirm loop's fallback re-check, seconds


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _runs(argv: list[str], data: bytes, n: int) -> tuple[list[float], float]:
    """Wall times (ms) of ``n`` runs and their mean CPU time (ms, user + system)."""
    walls = []
    cpu = _children_cpu()
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, input=data, capture_output=True, check=True, timeout=60)
        walls.append((time.perf_counter() - start) * 1000)
    return walls, (_children_cpu() - cpu) * 1000 / n


def hook_cost(channel: pathlib.Path, n: int) -> list[Row]:
    """Wall and CPU time of the hook command vs a bare interpreter start-up, in ms."""
    base, base_cpu = _runs([sys.executable, "-I", "-c", "pass"], b"", n)
    argv = emit_argv(channel, "claude", "UserPromptSubmit")
    ours, ours_cpu = _runs(argv, PAYLOAD.encode(), n)
    lines = channel.read_text().splitlines()
    check(len(lines) == n, f"{n} hook runs wrote {len(lines)} receipts")
    b, o = Stats.of(base), Stats.of(ours)
    return [
        {
            "measure": "hook command per event (wall)",
            "n": n,
            "baseline p50 ms": b.p50,
            "ours p50 ms": o.p50,
            "ours p99 ms": o.p99,
            "ratio": ratio(b.p50, o.p50),
        },
        {
            "measure": "hook command per event (CPU, mean)",
            "n": n,
            "baseline p50 ms": base_cpu,
            "ours p50 ms": ours_cpu,
            "ours p99 ms": float("nan"),
            "ratio": ratio(base_cpu, ours_cpu),
        },
    ]


async def _wake(channel: HookChannel, path: pathlib.Path) -> float:
    event = channel.event()
    await asyncio.sleep(0.3)  # let the watcher settle before the write
    argv = emit_argv(path, "gemini", "AfterAgent")
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE)
    await proc.communicate(PAYLOAD.encode())
    done = time.perf_counter()
    await asyncio.wait_for(event.wait(), 30)
    woke = time.perf_counter()
    check(bool(channel.read()), "the reader woke but read no receipt")
    return (woke - done) * 1000


async def wake_latency(directory: pathlib.Path, n: int) -> list[Row]:
    """From the hook's exit to a waiting reader's wake-up, vs a 0.25 s re-check tick."""
    path = create_channel(directory, "WAKE")
    channel = HookChannel(path)
    ours = [await _wake(channel, path) for _ in range(n)]
    await channel.close()
    # A reader on the timer alone finds a receipt half a tick late on average.
    baseline = RECHECK * 1000 / 2
    o = Stats.of(ours)
    return [
        {
            "measure": "reader wake-up after the hook exits",
            "n": n,
            "baseline p50 ms": baseline,
            "ours p50 ms": o.p50,
            "ours p99 ms": o.p99,
            "ratio": ratio(baseline, o.p50),
        }
    ]


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the receipt benchmarks and print their table; return it."""
    n = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="poli-bench-receipts-") as tmp:
        directory = pathlib.Path(tmp) / "hooks"
        rows = hook_cost(create_channel(directory, "COST"), n)
        rows += asyncio.run(wake_latency(directory, max(5, n // 4)))
    return {"receipts": print_table("Receipts: hook command cost and wake-up", rows)}


if __name__ == "__main__":
    cli(main)
