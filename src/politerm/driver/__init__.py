"""The agent driver: one way to drive an agent TUI, under every workflow.

Layer: above ``agents/``, ``protocol/``, ``terminal``, ``tmux/`` and ``pty/``; below
``engine/``, ``pipeline/``, ``epic/`` and the workflows built on them. See
:class:`AgentDriver`, :func:`~politerm.driver.turn.run_turn` and the one start path,
:class:`~politerm.driver.host.Host`.
"""

from __future__ import annotations

import typing as t

from politerm._internal.lazy import lazy_names

if t.TYPE_CHECKING:
    from politerm.driver.agent import AgentDriver
    from politerm.driver.approvals import Approver
    from politerm.driver.blocks import BlockReader, Window, turn_start
    from politerm.driver.delivery import DeliveryResult, Outcome, clear_input, deliver
    from politerm.driver.host import Host
    from politerm.driver.launch import Launched, check_program, launch
    from politerm.driver.limits import Limiter, LimitPolicy
    from politerm.driver.looking import Observation, watch
    from politerm.driver.ready import wait_ready
    from politerm.driver.receipts import Drift, Receipts, Source
    from politerm.driver.reports import ReportStream
    from politerm.driver.statedir import state_dir
    from politerm.driver.tokens import Budget, TokenMeter
    from politerm.driver.turn import Expect, TurnOutcome, TurnResult, run_turn

# Imported on first use: the views (``poli dash``, ``poli status``) need the observer and the
# pane listing only, not the turn machinery (protocol parsers, jsonschema, the PTY runner);
# importing it all made a third of the dashboard's start.
_LAZY = {
    "AgentDriver": "agent",
    "Approver": "approvals",
    "BlockReader": "blocks",
    "Window": "blocks",
    "turn_start": "blocks",
    "DeliveryResult": "delivery",
    "Outcome": "delivery",
    "clear_input": "delivery",
    "deliver": "delivery",
    "Host": "host",
    "state_dir": "statedir",
    "Launched": "launch",
    "check_program": "launch",
    "launch": "launch",
    "Limiter": "limits",
    "LimitPolicy": "limits",
    "Observation": "looking",
    "watch": "looking",
    "wait_ready": "ready",
    "Drift": "receipts",
    "Receipts": "receipts",
    "Source": "receipts",
    "ReportStream": "reports",
    "Budget": "tokens",
    "TokenMeter": "tokens",
    "Expect": "turn",
    "TurnOutcome": "turn",
    "TurnResult": "turn",
    "run_turn": "turn",
}

__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "AgentDriver",
    "Approver",
    "BlockReader",
    "Budget",
    "DeliveryResult",
    "Drift",
    "Expect",
    "Host",
    "Launched",
    "LimitPolicy",
    "Limiter",
    "Observation",
    "Outcome",
    "Receipts",
    "ReportStream",
    "Source",
    "TokenMeter",
    "TurnOutcome",
    "TurnResult",
    "Window",
    "check_program",
    "clear_input",
    "deliver",
    "launch",
    "run_turn",
    "state_dir",
    "turn_start",
    "wait_ready",
    "watch",
]
