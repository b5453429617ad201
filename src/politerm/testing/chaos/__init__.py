"""A chaos driver for politerm: seeded faults under a real session, judged from ground truth.

:mod:`~politerm.testing.chaos.project` writes the fake agents' scenarios (with their
``[faults]`` knobs) and a ``poli.toml``; :mod:`~politerm.testing.chaos.driver` runs
politerm through its command line while killing routers and tmux servers at seeded
moments; :mod:`~politerm.testing.chaos.truth` reads the fake agents' own logs and counts
lost, duplicated and merged prompts and false DONEs. Used by ``tests/faults/`` and
``bench/bench_faults.py``.
"""

from __future__ import annotations

from politerm.testing.chaos.driver import ChaosError, ChaosPlan, ChaosResult, ChaosRun
from politerm.testing.chaos.project import AgentSpec, expected_report, write_project
from politerm.testing.chaos.truth import Claim, Submission, Verdict, judge

__all__ = [
    "AgentSpec",
    "ChaosError",
    "ChaosPlan",
    "ChaosResult",
    "ChaosRun",
    "Claim",
    "Submission",
    "Verdict",
    "expected_report",
    "judge",
    "write_project",
]
