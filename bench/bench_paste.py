"""Paste cost: one ``tmux load-buffer`` process per prompt vs the control connection.

Both paths put the same 1 KiB prompt into a raw-mode sink pane through a uniquely named
buffer and ``paste-buffer -p -r -d`` over the session's control connection; they differ in
how the text reaches tmux:

- **load-buffer process** (politerm until this session): ``tmux load-buffer -b NAME -`` as
  its own process, the text on its stdin;
- **control connection** (:meth:`politerm.tmux.pane.Pane.paste` now): the text staged in a
  private 0600 file on ``/dev/shm``, ``load-buffer -b NAME FILE`` and ``paste-buffer``
  written together over the control connection, the file removed.

Each sample is the time until ``paste-buffer`` was answered. The two are interleaved, so load
on the machine hits both alike. ``python -m bench.bench_paste [--quick]``.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from bench._common import Bench, Row, Stats, cli, print_table, private_server, ratio
from bench.bench_engine import prompt_text
from politerm.tmux.pane import Pane

QUICK_N = 100
FULL_N = 500


async def _via_process(bench: Bench, pane: Pane, data: bytes) -> float:
    buffer = f"poli-{secrets.token_hex(8)}"
    t0 = time.perf_counter_ns()
    proc = await asyncio.create_subprocess_exec(
        *bench.tmux_argv("load-buffer", "-b", buffer, "-"),
        stdin=asyncio.subprocess.PIPE,
    )
    await proc.communicate(data)
    await pane.client.cmd("paste-buffer", "-p", "-r", "-d", "-b", buffer, "-t", pane.pane_id)
    return (time.perf_counter_ns() - t0) / 1e6


async def _via_control(pane: Pane, data: bytes) -> float:
    t0 = time.perf_counter_ns()
    await pane.paste(data)
    return (time.perf_counter_ns() - t0) / 1e6


async def bench_paste(bench: Bench, n: int) -> list[Row]:
    sink = await bench.window("sink", ["sh", "-c", "stty raw -echo; exec cat >/dev/null"])
    data = prompt_text(1024)
    process: list[float] = []
    control: list[float] = []
    for _ in range(n):
        process.append(await _via_process(bench, sink, data))
        control.append(await _via_control(sink, data))
    base = Stats.of(process)
    rows: list[Row] = []
    for path, samples in (
        ("load-buffer process (before)", process),
        ("control connection", control),
    ):
        s = Stats.of(samples)
        rows.append(
            {
                "path": path,
                "n": len(samples),
                "p50 ms": s.p50,
                "p99 ms": s.p99,
                "x p50": ratio(base.p50, s.p50),
                "x p99": ratio(base.p99, s.p99),
            }
        )
    return print_table("paste of a 1 KiB prompt until paste-buffer answered", rows)


async def run(quick: bool = False) -> dict[str, list[Row]]:
    async with private_server("paste") as bench:
        return {"paste": await bench_paste(bench, QUICK_N if quick else FULL_N)}


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the paste benchmark and print its table; return it."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
