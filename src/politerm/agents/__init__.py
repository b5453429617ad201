"""Agents: profiles as data, the states read off their screens, and approval policy."""

from __future__ import annotations

from politerm.agents.profile import (
    AgentProfile,
    ApprovalRequest,
    ApprovalSpec,
    Detectors,
    Dialog,
    Rendering,
    TranscriptSpec,
    guess_profile,
    list_profiles,
    load_profile,
)
from politerm.agents.state import AgentState, StateReading
from politerm.agents.tracker import StateTracker

__all__ = [
    "AgentProfile",
    "AgentState",
    "ApprovalRequest",
    "ApprovalSpec",
    "Detectors",
    "Dialog",
    "Rendering",
    "StateReading",
    "StateTracker",
    "TranscriptSpec",
    "guess_profile",
    "list_profiles",
    "load_profile",
]
