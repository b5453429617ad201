"""Manager benchmarks: the file channel's report pickup, and the engine's step handoff.

report pickup (file channel)
    From the moment an IDE agent finishes writing ``dev_logs/cursor_step_output.txt`` (with
    its end marker) to the moment :meth:`FileChannel.report` returns it. Baseline, measured in
    the same run: a loop that looks for the file every second, as a polling manager would.
step handoff
    From a finished report to the next instruction written to ``next_step.txt``, through the
    whole engine (store transactions, prompt building, one brain call through the Gemini SDK
    to the loopback mock server, atomic write). Baseline: the brain call alone (the same SDK
    call to the same server), so the difference is the engine's own cost.

Run ``python -m bench.bench_manager [--quick]`` or, with every benchmark,
``python -m bench.run``.
"""

from __future__ import annotations

import asyncio
import pathlib
import tempfile
import time
import typing as t

from bench._common import Row, Stats, cli, print_table, ratio
from politerm.config.manager import BrainSettings, ManagerConfig
from politerm.manager.brain import GeminiBrain
from politerm.manager.channels import FileChannel
from politerm.manager.engine import Manager
from politerm.manager.store import ManagerStore
from politerm.redact import Redactor
from politerm.store import RunStore
from politerm.testing.mockllm import MockLLM, Rule

POLL_INTERVAL = 1.0


def _row(name: str, samples_ms: t.Sequence[float], base_ms: t.Sequence[float]) -> Row:
    s, b = Stats.of(samples_ms), Stats.of(base_ms)
    return {"measure": name, "n": s.n, "p50 ms": s.p50, "p99 ms": s.p99,
            "baseline p50 ms": b.p50, "baseline p99 ms": b.p99,
            "p50 ratio": ratio(b.p50, s.p50)}  # fmt: skip


def _write_report(root: pathlib.Path, step: int) -> float:
    out = root / "dev_logs" / "cursor_step_output.txt"
    out.write_text(f"Report for step {step}\nEND_OF_REPORT\n")
    return time.perf_counter()


async def _poll_report(root: pathlib.Path) -> str:
    path = root / "dev_logs" / "cursor_step_output.txt"
    while True:
        if path.exists() and path.read_text().rstrip().endswith("END_OF_REPORT"):
            text = path.read_text()
            path.unlink()
            return text
        await asyncio.sleep(POLL_INTERVAL)


async def pickup(n: int) -> tuple[list[float], list[float]]:
    """Report pickup latency, ours (watchfiles) and the polling baseline, in ms."""
    ours: list[float] = []
    base: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "dev_logs").mkdir()
        channel = FileChannel(root, stable_seconds=5.0)
        for step in range(1, n + 1):
            task = asyncio.create_task(channel.report("bench", step, 30.0))
            await asyncio.sleep(0.3)  # the watcher is up
            written = _write_report(root, step)
            await task
            ours.append((time.perf_counter() - written) * 1000)
            poll = asyncio.create_task(_poll_report(root))
            # Finish at a random point of the poller's cycle, as a real agent would.
            await asyncio.sleep(0.3 + (step * 0.37) % POLL_INTERVAL)
            written = _write_report(root, step)
            await poll
            base.append((time.perf_counter() - written) * 1000)
    return ours, base


async def handoff(n: int) -> tuple[list[float], list[float]]:
    """Report → next instruction through the engine, and the bare brain call, in ms."""
    rules = [Rule(rf"Report for step {i}\b", f"Do step {i + 1}") for i in range(1, n + 2)]
    rules.append(Rule(".*", "Do step 1"))
    ours: list[float] = []
    base: list[float] = []
    with MockLLM(rules, sides=False) as llm, tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "proj"
        root.mkdir()
        settings = BrainSettings(provider="gemini", base_url=llm.url, model="m", backoff=0.01)
        config = ManagerConfig(brain=settings, channel="file", summarize_after_turns=10_000)
        store = RunStore.open(pathlib.Path(tmp) / "runs.sqlite3")
        mstore = ManagerStore(store)
        mstore.add_project("b", root, channel="file")
        brain = GeminiBrain(settings, llm.token, Redactor())
        manager = Manager(
            mstore, config, brain, lambda p: FileChannel(pathlib.Path(p.path), stable_seconds=5)
        )
        instruction = root / "dev_instructions" / "next_step.txt"
        manager.start("b", "bench")
        runner = asyncio.create_task(manager.run("b"))
        written = 0.0
        try:
            for step in range(1, n + 2):
                while not (instruction.exists() and f"# Step {step} " in instruction.read_text()):
                    await asyncio.sleep(0.001)  # the bench's own probe, not the engine's
                if step > 1:
                    ours.append((time.perf_counter() - written) * 1000)
                await asyncio.sleep(0.2)
                written = _write_report(root, step)
            for _ in range(n):
                start = time.perf_counter()
                await brain.ask("Report for step 1", system="bench")
                base.append((time.perf_counter() - start) * 1000)
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await brain.aclose()
            store.close()
    return ours, base


async def run(quick: bool = False) -> list[Row]:
    """Both measures; prints the table."""
    n = 5 if quick else 20
    p_ours, p_base = await pickup(n)
    h_ours, h_base = await handoff(n)
    rows = [
        _row("report pickup vs 1 s polling", p_ours, p_base),
        _row("step handoff vs the brain call alone", h_ours, h_base),
    ]
    return print_table("manager", rows)


def main(quick: bool = False) -> list[Row]:
    """Run the manager benchmarks and print their table; return it."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
