"""The long fault run: ≥ 1,000 handoffs under seeded faults, judged from the fake agents' logs.

Each row is one chaos run (:mod:`politerm.testing.chaos`): a real politerm session driven
through ``poli up`` / ``poli route`` / ``poli up --resume`` in subprocesses on a private
tmux server, with routers killed (``kill -9``), tmux servers killed, and fake agents that
lose Enters, crash (before submit, after submit, mid-reply), freeze, think slowly and leave
text in their input box. The first row is the baseline of the same run with no fault at
all: every other row's throughput is printed as a ratio to it.

Reliability is counted from the agents' own logs, never from politerm's store: lost
(a handoff never answered, a task not DONE), duplicated, merged, false DONE. The run fails
(exit 1) when any of them is not 0, after printing every finding with its seed.

Run ``python -m bench.bench_faults [--quick]``; ``--quick`` runs about 150 handoffs.
The figures go into docs/reliability.md.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import typing as t

from bench._common import Row, check, cli, fakeagent_available, print_table
from politerm.testing.chaos import AgentSpec, ChaosPlan, ChaosResult, ChaosRun

_runs = 0


def _faulty(mode: str, **extra: object) -> AgentSpec:
    knobs: dict[str, object] = {
        "lose_enter": 0.1,
        "slow_share": 0.1,
        "slow_seconds": 0.8,
        "freeze_share": 0.05,
        "freeze_seconds": 0.8,
        **extra,
    }
    return AgentSpec(mode=mode, faults=knobs)


def plans(quick: bool) -> list[tuple[str, ChaosPlan]]:
    """The runs, baseline first; ``quick`` scales every run down."""
    n = 12 if quick else 1

    def size(tasks: int) -> int:
        return max(3, tasks // n)

    def budget(tasks: int) -> float:
        return 60.0 + 3.0 * size(tasks)  # a wedged run ends here and is reported

    def plan(seed: int, tasks: int, **kw: t.Any) -> ChaosPlan:
        return ChaosPlan(seed=seed, tasks=size(tasks), budget=budget(tasks), **kw)

    return [
        ("baseline: no faults", plan(1, 60, wave=4)),
        (
            "agent faults: lost Enters, slow, freeze",
            plan(2, 250, wave=4, planner=_faulty("claude"), executer=_faulty("codex")),
        ),
        (
            "crash before submit + poli up --resume",
            plan(
                3,
                30,
                wave=3,
                planner=_faulty("claude", crash_at="before_submit", crash_share=0.1, crash_max=2),
                executer=_faulty("codex", crash_at="before_submit", crash_share=0.1, crash_max=2),
            ),
        ),
        ("tmux server kills + poli up --resume", plan(4, 30, wave=3, server_kills=size(2))),
        ("backlog queued at once, two routers", plan(5, 40, two_routers=True)),
        (
            "kill -9 router + agent faults",
            plan(
                6,
                60,
                wave=4,
                router_kills=size(10),
                planner=_faulty("claude"),
                executer=_faulty("codex"),
            ),
        ),
        (
            "crash after submit / mid-reply + poli up --resume",
            plan(
                7,
                20,
                wave=2,
                planner=AgentSpec(faults={"crash_at": "after_submit", "crash_share": 0.2}),
                executer=AgentSpec(
                    mode="codex", faults={"crash_at": "mid_reply", "crash_share": 0.2}
                ),
            ),
        ),
        (
            "crashes + kill -9 + server kills + agent faults",
            plan(
                10,
                30,
                wave=3,
                router_kills=size(4),
                server_kills=size(2),
                planner=_faulty("claude", crash_at="after_submit", crash_share=0.1, crash_max=2),
                executer=_faulty("codex", crash_at="mid_reply", crash_share=0.1, crash_max=2),
            ),
        ),
        (
            "text left in the input box",
            plan(
                8,
                20,
                wave=2,
                planner=_faulty("claude", leave_text_share=0.3),
                executer=_faulty("codex", leave_text_share=0.3),
            ),
        ),
    ]


def run_one(plan: ChaosPlan) -> ChaosResult:
    """One chaos run on its own tmux socket and temporary directory."""
    global _runs
    _runs += 1
    socket = f"poli-chaos-{os.getpid()}-{_runs}"
    root = pathlib.Path(tempfile.mkdtemp(prefix="poli-bench-faults-"))
    keep = True  # the agents' logs are the evidence of each finding (or of a broken run)
    try:
        result = ChaosRun(root / "chaos", socket, plan).run()
        keep = not result.verdict.ok
        if keep:
            result.notes.append(f"agents' logs kept in {root / 'chaos'}")
        return result
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def main(quick: bool = False) -> list[Row]:
    """Run every plan; print one row each and every finding; fail on any finding."""
    check(fakeagent_available(), "the fake agent does not run here")
    rows: list[Row] = []
    findings: list[str] = []
    base_rate = 0.0
    for title, plan in plans(quick):
        result = run_one(plan)
        v = result.verdict
        rate = v.handoffs / result.seconds if result.seconds else 0.0
        base_rate = base_rate or rate
        faults = ", ".join(f"{k} {c}" for k, c in sorted(v.faults.items()))
        rows.append(
            {
                "run": title,
                "seed": plan.seed,
                "tasks": v.tasks,
                "handoffs": v.handoffs,
                "prompts": v.prompts,
                "nudges": v.nudges,
                "kill -9": result.router_kills,
                "server kills": result.server_kills,
                "resumes": result.resumes,
                "agent faults": faults or "none",
                "lost": len(v.lost),
                "dup": len(v.duplicated),
                "merged": len(v.merged),
                "false DONE": len(v.false_done),
                "s": round(result.seconds, 1),
                "handoffs/s vs baseline": f"{rate:.2f} ({rate / base_rate:.2f}x)"
                if base_rate
                else f"{rate:.2f}",
            }
        )
        print(f"\n{title} (seed {plan.seed}):\n{result.summary()}", flush=True)
        if not v.ok:
            findings.append(f"{title} (seed {plan.seed}): {v.summary().splitlines()[0]}")
    total = sum(t.cast("int", r["handoffs"]) for r in rows)
    print_table(f"fault runs ({total} handoffs answered in all)", rows)
    check(not findings, "; ".join(findings))
    check(quick or total >= 1000, f"only {total} handoffs answered; the long run needs 1000")
    return rows


if __name__ == "__main__":
    cli(main)
