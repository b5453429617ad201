"""Pipeline benchmarks: the runner's overhead per step, and step-to-step latency.

A pipeline of sequential steps runs on the bundled fake agent (``--cli fake``, TUI mode) in a
private tmux server, with the runner in this process so its timestamps can be read:

overhead per step
    The step's wall time (state ``started`` → ``done`` written) minus the agent's own time
    (the fake agent's log: prompt submitted → reply finished). What is left is the runner:
    opening the window, starting the agent and waiting for it to be ready, delivering the
    prompt with confirmation, finding the ``done`` block, killing the agent's process tree
    and writing the state.
completion → next prompt confirmed
    From the moment the runner sees step N's ``done`` block to the moment the delivery of
    step N+1's prompt is confirmed (this includes starting step N+1's agent).

Run ``python -m bench.bench_pipeline [--quick]`` or, with every benchmark,
``python -m bench.run``.
"""

from __future__ import annotations

import asyncio
import typing as t

from bench._common import Row, Stats, check, cli, fakeagent_available, print_table, private_server
from politerm.config import load_config
from politerm.pipeline.model import RunStatus, StepStatus
from politerm.pipeline.parser import load_pipeline
from politerm.pipeline.runner import PipelineRunner, start_run
from politerm.pipeline.state import RunRecord, session_name
from politerm.store import RunStore
from politerm.testing.fakeagent import read_log

QUICK_STEPS = 4
FULL_STEPS = 12


def _stats_row(name: str, samples_ms: t.Sequence[float]) -> Row:
    s = Stats.of(samples_ms)
    return {"measure": name, "n": s.n, "mean ms": s.mean, "p50 ms": s.p50, "p99 ms": s.p99,
            "min ms": s.min, "max ms": s.max}  # fmt: skip


async def run(quick: bool = False) -> list[Row]:
    """Run the pipeline once and print the table."""
    check(fakeagent_available(), "the fake agent does not run here")
    steps = QUICK_STEPS if quick else FULL_STEPS
    async with private_server("pipeline") as bench:
        root = bench.workdir / "proj"
        (root / ".poli" / "pipelines").mkdir(parents=True)
        (root / "poli.toml").write_text(
            f'[tmux]\nsocket = "{bench.socket}"\n\n[store]\npath = "runs.sqlite3"\n'
        )
        rows = "".join(f"{n} | tester | - | auto | - | - | Step {n}\n" for n in range(1, steps + 1))
        path = root / ".poli" / "pipelines" / "bench.pipeline"
        path.write_text("name: bench\ntimeout_min: 2\n" + rows)
        pipeline = load_pipeline(path, root)
        config = load_config(root, env={})
        store = RunStore.open(config.store.resolved_path())
        try:
            record = RunRecord(
                run_id="BENCH",
                pipeline=str(pipeline.path),
                pipeline_name=pipeline.name,
                project=str(root),
                task="benchmark",
                session=session_name(root, "BENCH"),
                socket=bench.socket,
                cli="fake",
            )
            state = start_run(pipeline, record, store)
            runner = PipelineRunner(pipeline, state, config)
            status = await runner.run()
            check(status is RunStatus.DONE, f"the pipeline ended {status.value}")
            overhead: list[float] = []
            agent: list[float] = []
            for num in range(1, steps + 1):
                rec = state.record.step(num)
                check(rec.status is StepStatus.DONE, f"step {num} is {rec.status.value}")
                log = read_log(state.steps_dir / f"step-{num}.a1.jsonl")
                prompt = next(e["ts"] for e in log if e["event"] == "prompt")
                reply = next(e["ts"] for e in log if e["event"] == "reply")
                assert rec.started is not None and rec.finished is not None
                agent.append((reply - prompt) * 1000)
                overhead.append((rec.finished - rec.started - (reply - prompt)) * 1000)
            gaps = [
                (runner.marks[f"delivered:{n + 1}"] - runner.marks[f"done:{n}"]) * 1000
                for n in range(1, steps)
            ]
        finally:
            store.close()
    return print_table(
        f"pipeline: {steps} sequential steps on the fake agent (claude mode, think 0.3 s)",
        [
            _stats_row("step wall time minus agent time (runner overhead)", overhead),
            _stats_row("agent's own time (prompt → reply, fake log)", agent),
            _stats_row("done block seen → next prompt confirmed", gaps),
        ],
    )


def main(quick: bool = False) -> list[Row]:
    """Run the pipeline benchmark and print its table; return it."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
