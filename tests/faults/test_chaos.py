"""Chaos runs: a real politerm session under seeded faults, judged from the fake agents' logs.

Each run drives ``poli up`` / ``poli route`` / ``poli up --resume`` in subprocesses on
this test's private tmux server while the driver kills routers and servers and the fake
agents lose Enters, crash, freeze, think slowly or leave text in their input box. The
verdict comes from the agents' own logs: 0 lost, 0 duplicated, 0 merged, 0 false DONE.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.testing.chaos import AgentSpec, ChaosPlan, ChaosResult, ChaosRun

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def chaos(server: libtmux.Server, tmp_path: pathlib.Path, plan: ChaosPlan) -> ChaosResult:
    """Run ``plan`` on this test's tmux socket; fail with the whole verdict unless clean."""
    assert server.socket_name is not None
    result = ChaosRun(tmp_path / "chaos", server.socket_name, plan).run()
    assert result.verdict.ok, f"seed {plan.seed}: {result.summary()}"
    assert result.verdict.tasks == plan.tasks, result.summary()
    assert result.verdict.handoffs == 3 * plan.tasks, result.summary()
    return result


def planner(**faults: object) -> AgentSpec:
    return AgentSpec(mode="claude", faults=faults)


def executer(**faults: object) -> AgentSpec:
    return AgentSpec(mode="codex", faults=faults)


@pytest.mark.timeout(300)
def test_ci_run_of_210_handoffs_under_mixed_faults(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    plan = ChaosPlan(
        seed=20261123,
        tasks=70,
        wave=4,
        router_kills=8,
        planner=planner(slow_share=0.1, slow_seconds=0.8, freeze_share=0.05, freeze_seconds=0.8),
        executer=executer(slow_share=0.1, slow_seconds=0.8, freeze_share=0.1, freeze_seconds=0.8),
        budget=240,
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.handoffs >= 200
    assert result.router_kills == 8
    assert {"slow", "freeze"} <= set(result.verdict.faults), result.summary()


def test_lost_enters_are_resubmitted_once(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(
        seed=3,
        tasks=10,
        wave=3,
        planner=planner(lose_enter=0.25),
        executer=executer(lose_enter=0.25),
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["lost_enter"] > 0, result.summary()


@pytest.mark.parametrize("at", ["before_submit", "after_submit", "mid_reply"])
def test_agent_crash_then_up_resume(
    server: libtmux.Server, tmp_path: pathlib.Path, at: str
) -> None:
    plan = ChaosPlan(
        seed=5, tasks=6, wave=2, executer=executer(crash_at=at, crash_share=1.0, crash_after=2)
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults[f"crash:{at}"] == 1 and result.resumes >= 1, result.summary()


def test_tmux_server_killed_then_up_resume(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=11, tasks=6, wave=2, server_kills=1, kill_after=(0.5, 1.5))
    result = chaos(server, tmp_path, plan)
    assert result.server_kills == 1 and result.resumes >= 1, result.summary()


def test_text_left_in_the_box_is_cleared_never_merged(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    plan = ChaosPlan(
        seed=13,
        tasks=8,
        wave=2,
        planner=planner(leave_text_share=0.5),
        executer=executer(leave_text_share=0.5),
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["leave_text"] > 0, result.summary()


def test_backlog_queued_at_once(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=17, tasks=24, timeout=15, executer=executer(slow_share=0.2))
    chaos(server, tmp_path, plan)


def test_two_routers_started_together(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=19, tasks=8, wave=3, two_routers=True, router_kills=2)
    result = chaos(server, tmp_path, plan)
    assert result.refused_routers >= 1, result.summary()


def test_router_kill9_with_lost_enters(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(
        seed=1,
        tasks=12,
        wave=3,
        router_kills=4,
        planner=planner(lose_enter=0.3),
        executer=executer(lose_enter=0.3),
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["lost_enter"] > 0 and result.router_kills == 4, result.summary()
