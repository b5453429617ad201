"""Shared pieces of the benchmarks: a private tmux server, timing, statistics, a table printer.

Every benchmark runs against its own tmux server on a unique socket name
(``poli-bench-<pid>-<n>``) that is killed on the way out, whatever happened; the user's
default server is never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import math
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t

from politerm.testing.retry import aretry_until
from politerm.tmux import ControlClient, Pane, TmuxServer, new_window

if t.TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

SESSION = "bench"
FAKEAGENT = [sys.executable, "-m", "politerm.testing.fakeagent"]
_counter = 0


class BenchError(RuntimeError):
    """A benchmark saw a wrong result (not a slow one): the run must fail."""


def check(condition: bool, message: str) -> None:
    """Fail the run loudly when a correctness condition does not hold."""
    if not condition:
        raise BenchError(message)


# --- timing and statistics ---------------------------------------------------------------


def now_ns() -> int:
    """``CLOCK_MONOTONIC`` in ns; system-wide on Linux, so comparable across processes."""
    return time.monotonic_ns()


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile of ``values`` (linear interpolation, as numpy's default).

    Examples
    --------
    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    >>> percentile([5.0], 99)
    5.0
    """
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    lo = math.floor(rank)
    hi = math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


@dataclasses.dataclass(frozen=True)
class Stats:
    """Summary of a sample of durations, in milliseconds."""

    n: int
    mean: float
    p50: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Stats:
        """Summarise ``samples_ms``."""
        if not samples_ms:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return cls(
            n=len(samples_ms),
            mean=sum(samples_ms) / len(samples_ms),
            p50=percentile(samples_ms, 50),
            p99=percentile(samples_ms, 99),
            min=min(samples_ms),
            max=max(samples_ms),
        )


def ratio(baseline: float, ours: float) -> float:
    """``baseline / ours``: above 1 means we are faster than the baseline."""
    if ours <= 0 or math.isnan(ours) or math.isnan(baseline):
        return math.nan
    return baseline / ours


# --- printing ----------------------------------------------------------------------------

Cell = str | int | float
Row = dict[str, Cell]


def one_vs_two_nodes(local: Stats, remote: Stats) -> Row:
    """The fleet benches' columns: p50/p99 on one node and across two, and two/one."""
    return {
        "one node p50 ms": local.p50,
        "one node p99 ms": local.p99,
        "two nodes p50 ms": remote.p50,
        "two nodes p99 ms": remote.p99,
        "two/one p50": ratio(remote.p50, local.p50),
        "two/one p99": ratio(remote.p99, local.p99),
    }


def fmt(value: Cell) -> str:
    """Format one table cell: floats with 3 significant digits, the rest as text.

    Examples
    --------
    >>> fmt(0.012345), fmt(12.345), fmt(1234.5), fmt(7), fmt("x")
    ('0.0123', '12.3', '1234', '7', 'x')
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 100:
            return f"{value:.0f}"
        return f"{value:.3g}"
    return str(value)


def print_table(title: str, rows: Sequence[Row]) -> list[Row]:
    """Print ``rows`` (dicts sharing their keys) as an aligned table; return them."""
    out = list(rows)
    print(f"\n## {title}")
    if not out:
        print("(no rows)")
        return out
    headers = list(out[0])
    cells = [[fmt(r.get(h, "")) for h in headers] for r in out]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(items: Sequence[str]) -> str:
        return "| " + " | ".join(s.rjust(w) for s, w in zip(items, widths, strict=True)) + " |"

    print(line(headers))
    print("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for c in cells:
        print(line(c))
    sys.stdout.flush()
    return out


# --- a private tmux server ---------------------------------------------------------------


@dataclasses.dataclass
class Bench:
    """A private tmux server, its control connection to session ``bench``, a work dir."""

    server: TmuxServer
    client: ControlClient
    workdir: pathlib.Path

    @property
    def socket(self) -> str:
        """The ``tmux -L`` socket name."""
        return self.server.socket_name

    def tmux_argv(self, *args: str) -> list[str]:
        """A one-shot tmux command line on our socket (what the baselines spawn)."""
        return [self.server.tmux, "-L", self.socket, *args]

    async def window(self, name: str, argv: Sequence[str]) -> Pane:
        """Open a window running ``argv`` and return its pane."""
        return await new_window(
            self.client, self.server, session=SESSION, name=name, argv=list(argv), cwd=self.workdir
        )

    def log_path(self, name: str) -> pathlib.Path:
        """The JSONL log of the fake agent started as ``name``."""
        return self.workdir / f"{name}.jsonl"

    async def fake_agent(self, mode: str, name: str) -> Pane:
        """Start the fake agent in ``mode``, logging to :meth:`log_path`; return its pane."""
        log = self.log_path(name)
        argv = [*FAKEAGENT, "--mode", mode, "--log", str(log), "--name", name]
        if mode == "codex":
            argv.append("--no-alt-screen")  # as the fake-codex profile runs it
        pane = await self.window(name, argv)

        async def started() -> bool:
            return log.exists() and '"event": "start"' in log.read_text("ascii")

        await aretry_until(started, 20, what=f"the fake agent ({mode}) to start")
        return pane


def fakeagent_available() -> bool:
    """Whether ``python -m politerm.testing.fakeagent`` runs here."""
    try:
        proc = subprocess.run([*FAKEAGENT, "--help"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


@contextlib.asynccontextmanager
async def private_server(
    name: str = "bench", *, history_limit: int | None = None
) -> AsyncIterator[Bench]:
    """A fresh tmux server on a unique socket, killed on exit even when the body fails."""
    global _counter  # one counter per process makes the socket unique
    _counter += 1
    socket = f"poli-bench-{os.getpid()}-{_counter}"
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"poli-bench-{name}-"))
    server = TmuxServer(socket, config_dir=workdir / "tmuxconf")
    if history_limit is not None:
        server.history_limit = history_limit
    socket_path: str | None = None
    try:
        await server.ensure_session(SESSION, cwd=workdir)
        client = await server.connect(SESSION)
        socket_path = (await client.cmd("display-message", "-p", "#{socket_path}"))[0]
        yield Bench(server, client, workdir)
    finally:
        with contextlib.suppress(Exception):
            await server.kill_server()
        _kill_server(server.tmux, socket, socket_path)
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_server(tmux: str, socket: str, socket_path: str | None) -> None:
    # Belt and braces after TmuxServer.kill_server: a hung control client cannot save it.
    argv = [tmux, "-L", socket, "kill-server"]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(argv, capture_output=True, timeout=10, check=False)
    # tmux leaves its socket file behind after kill-server; nothing answers on it any more.
    if socket_path and pathlib.Path(socket_path).name == socket:
        pathlib.Path(socket_path).unlink(missing_ok=True)


# --- running -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None, *, prog: str | None = None) -> argparse.Namespace:
    """The options every benchmark entry point takes."""
    parser = argparse.ArgumentParser(prog=prog, description="politerm benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer samples (under a minute)")
    return parser.parse_args(argv)


def cli(main: Callable[..., object]) -> None:
    """``python -m bench.bench_x [--quick]``: run one benchmark module's ``main``."""
    args = parse_args()
    print_machine()
    try:
        main(quick=args.quick)
    except BenchError as exc:
        print(f"\nBENCHMARK FAILED: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _tmux_version() -> str:
    try:
        out = subprocess.run(["tmux", "-V"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return out.stdout.decode().strip()


def machine_info() -> dict[str, str]:
    """What the figures depend on: cores, CPU, memory, tmux, Python, kernel, date."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count() or "?"),
        "cpu": _cpu_model(),
        "memory": _memory(),
        "tmux": _tmux_version(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def print_machine() -> dict[str, str]:
    """Print :func:`machine_info` as one block; return it."""
    info = machine_info()
    print("# politerm benchmarks")
    for key, value in info.items():
        print(f"- {key}: {value}")
    sys.stdout.flush()
    return info
