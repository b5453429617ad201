"""Chaos runs: a real politerm session under seeded faults, judged from the fake agents' logs.

Each run drives ``poli up`` / ``poli route`` / ``poli up --resume`` in subprocesses on
this test's private tmux server while the driver kills routers (``kill -9``) at seeded
moments and the fake agents lose Enters, freeze, think slowly or leave text in their
input box, crash (before submit, after submit, mid-reply: then ``poli up --resume``), and
the tmux server is killed (then ``poli up --resume``). The verdict comes from the agents'
own logs: 0 lost, 0 duplicated, 0 merged, 0 false DONE. test_resume_moments.py puts each
crash and server-kill failure found here at its exact moment.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.testing.chaos import ChaosPlan
from tests.faults._chaos import chaos, executer, planner

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

pytestmark = pytest.mark.timeout(200)


@pytest.mark.timeout(400)
def test_ci_run_of_204_handoffs_with_router_kill9_and_agent_faults(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    knobs = {
        "lose_enter": 0.05,
        "slow_share": 0.1,
        "slow_seconds": 0.8,
        "freeze_share": 0.05,
        "freeze_seconds": 0.8,
    }
    plan = ChaosPlan(
        seed=20261123,
        tasks=68,
        wave=4,
        router_kills=8,
        planner=planner(**knobs),
        executer=executer(**knobs),
        budget=300,
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.handoffs >= 200 and result.router_kills == 8, result.summary()
    assert {"lost_enter", "slow", "freeze"} <= set(result.verdict.faults), result.summary()


def test_router_kill9_with_lost_enters(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    lose = {"lose_enter": 0.3}
    plan = ChaosPlan(
        seed=1,
        tasks=8,
        wave=3,
        router_kills=3,
        planner=planner(**lose),
        executer=executer(**lose),
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["lost_enter"] > 0 and result.router_kills == 3, result.summary()


def test_text_left_in_the_box_is_cleared_never_merged(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    plan = ChaosPlan(
        seed=13,
        tasks=6,
        wave=2,
        planner=planner(leave_text_share=0.5),
        executer=executer(leave_text_share=0.5),
    )
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["leave_text"] > 0, result.summary()


def test_backlog_queued_at_once(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=17, tasks=12, timeout=20, executer=executer(slow_share=0.3))
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults["slow"] > 0, result.summary()


def test_two_routers_started_together(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=19, tasks=6, wave=3, two_routers=True)
    result = chaos(server, tmp_path, plan)
    assert result.refused_routers >= 1, result.summary()


@pytest.mark.parametrize("at", ["before_submit", "after_submit", "mid_reply"])
def test_agent_crash_then_up_resume(
    server: libtmux.Server, tmp_path: pathlib.Path, at: str
) -> None:
    """The EXECUTER crashes on its third prompt; the restarted one gets its pending work."""
    crash = {"crash_at": at, "crash_share": 1.0, "crash_after": 2}
    plan = ChaosPlan(seed=5, tasks=6, wave=2, executer=executer(**crash))
    result = chaos(server, tmp_path, plan)
    assert result.verdict.faults[f"crash:{at}"] == 1, result.summary()
    assert result.resumes >= 1, result.summary()


def test_tmux_server_killed_then_up_resume(server: libtmux.Server, tmp_path: pathlib.Path) -> None:
    plan = ChaosPlan(seed=11, tasks=6, wave=2, server_kills=1, kill_after=(0.2, 0.6))
    result = chaos(server, tmp_path, plan)
    assert result.server_kills == 1 and result.resumes >= 1, result.summary()
