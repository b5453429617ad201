"""Shared by the chaos tests: run a plan on the test's tmux socket and demand a clean verdict."""

from __future__ import annotations

import dataclasses
import typing as t

from politerm.testing.chaos import AgentSpec, ChaosPlan, ChaosResult, ChaosRun

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

BUDGET = 90.0  # small runs: a verdict well before pytest's timeout


def chaos(server: libtmux.Server, tmp_path: pathlib.Path, plan: ChaosPlan) -> ChaosResult:
    """Run ``plan`` on this test's tmux socket; fail with the whole verdict unless clean."""
    assert server.socket_name is not None
    if plan.budget > BUDGET and plan.tasks < 30:
        plan = dataclasses.replace(plan, budget=BUDGET)
    root = tmp_path / "chaos"
    result = ChaosRun(root, server.socket_name, plan).run()
    assert result.verdict.ok, f"seed {plan.seed}, agents' logs in {root}:\n{result.summary()}"
    assert result.verdict.tasks == plan.tasks, result.summary()
    assert result.verdict.handoffs == 3 * plan.tasks, result.summary()
    return result


def planner(**faults: object) -> AgentSpec:
    """A claude-mode PLANNER with these ``[faults]`` knobs."""
    return AgentSpec(mode="claude", faults=faults)


def executer(**faults: object) -> AgentSpec:
    """A codex-mode EXECUTER with these ``[faults]`` knobs."""
    return AgentSpec(mode="codex", faults=faults)
