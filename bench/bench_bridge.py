"""Task bridge benchmarks: the runner, the locked queue, and a task end to end.

runner
    One short command (``true``) through :func:`politerm.bridge.runner.run_command`
    (status file, per-stream capture, tree kill) and through the detached runner process
    the bridge uses, against the baseline of ``subprocess.run`` on the same shell command.
locked queue write
    One ``TaskQueue.submit`` (flock, read, append, write-temp, fsync, rename, fsync dir)
    against the baseline of writing the same JSON with a plain ``write_text`` (no lock, no
    fsync: what the original bridge did, and why its updates could be torn or lost).
task end to end
    Submit → archived and pruned for an edit task and for a one-command task, with the
    bridge in this process (``drain``), against the baseline of applying the same edit
    directly (``plan_edits`` + ``write_planned``) and running the same command with
    ``subprocess.run``.

Run ``python -m bench.bench_bridge [--quick]`` or, with every benchmark,
``python -m bench.run``.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import tempfile
import time
import typing as t

from bench._common import Row, Stats, check, cli, print_table, ratio
from politerm.bridge.bridge import Bridge
from politerm.bridge.edits import plan_edits, write_planned
from politerm.bridge.executor import BuiltinExecutor
from politerm.bridge.models import FileModificationInstruction
from politerm.bridge.queue import TaskQueue, dump_json
from politerm.bridge.runner import CommandSpec, run_command
from politerm.store import RunStore
from politerm.store.bridge import BridgeJournal


def _ms(fn: t.Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _row(measure: str, ours: list[float], base: list[float]) -> Row:
    s, b = Stats.of(ours), Stats.of(base)
    return {
        "measure": measure,
        "n": s.n,
        "p50 ms": s.p50,
        "p99 ms": s.p99,
        "baseline p50 ms": b.p50,
        "baseline/ours": ratio(b.p50, s.p50),
    }


def bench_runner(root: pathlib.Path, n: int) -> list[Row]:
    out = root / "runner"

    def inline() -> None:
        spec = CommandSpec(command_id="c", command="true", working_directory=str(root),
                           out_dir=str(out))  # fmt: skip
        check(run_command(spec).succeeded, "runner: true did not succeed")

    spec_path = root / "spec.json"
    spec_path.write_text(
        CommandSpec(
            command_id="d", command="true", working_directory=str(root), out_dir=str(out)
        ).model_dump_json()
    )

    def detached() -> None:
        done = subprocess.run(
            [sys.executable, "-m", "politerm.bridge.runner", str(spec_path)], check=False
        )
        check(done.returncode == 0, "detached runner failed")

    def baseline() -> None:
        subprocess.run(["/bin/sh", "-c", "true"], check=True, capture_output=True)

    base = _ms(baseline, n)
    return [
        _row("runner in-process (true)", _ms(inline, n), base),
        _row("detached runner process (true)", _ms(detached, max(3, n // 4)), base),
    ]


def bench_queue(root: pathlib.Path, n: int) -> list[Row]:
    queue = TaskQueue(root / "q" / "task_queue.json")
    plain = root / "plain.json"
    tasks: list[dict[str, t.Any]] = []
    counter = iter(range(10**9))

    def submit() -> None:
        queue.submit([{"task_id": f"t{next(counter)}", "instruction_details": {}}])

    def baseline() -> None:
        tasks.append({"task_id": f"p{len(tasks)}", "instruction_details": {}})
        plain.write_bytes(dump_json({"tasks": tasks}))

    base = _ms(baseline, n)
    ours = _ms(submit, n)
    check(len(queue.read()) == n, "queue lost a task")
    return [_row(f"locked atomic submit (queue of up to {n})", ours, base)]


def bench_tasks(root: pathlib.Path, n: int) -> list[Row]:
    work = root / "tasks"
    work.mkdir()
    target = work / "f.txt"
    target.write_text("start\n")
    with RunStore.open(root / "runs.sqlite3") as store:
        queue = TaskQueue(work / "bq" / "task_queue.json")
        bridge = Bridge(
            queue, BuiltinExecutor(), BridgeJournal(store, str(queue.path)), base_dir=work
        )
        counter = iter(range(10**9))

        def one(details: dict[str, t.Any]) -> None:
            tid = f"t{next(counter)}"
            queue.submit([{"task_id": tid, "instruction_details": details}])
            asyncio.run(bridge.drain())
            check((work / "bq" / "archive" / "processed" / tid).is_dir(), f"{tid} not done")

        edit = {"file_path": "f.txt", "action": "append_content", "content": "x\n"}
        mod = FileModificationInstruction.model_validate(edit)
        cmd = {"commands_to_execute": [{"command_id": "c", "command": "true"}]}
        rows = [
            _row(
                "edit task submit → archived",
                _ms(lambda: one(edit), n),
                _ms(lambda: write_planned(plan_edits([mod], work)), n),
            ),
            _row(
                "command task submit → archived",
                _ms(lambda: one(cmd), max(3, n // 4)),
                _ms(lambda: subprocess.run(["/bin/sh", "-c", "true"], check=True), n),
            ),
        ]
    return rows


def main(quick: bool = False) -> list[Row]:
    n = 10 if quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        rows = print_table("bridge runner", bench_runner(root, n))
        rows += print_table("bridge queue", bench_queue(root, n * 5))
        rows += print_table("bridge tasks", bench_tasks(root, n))
    return rows


if __name__ == "__main__":
    cli(main)
