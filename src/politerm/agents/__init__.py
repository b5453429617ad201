"""Agents: profiles as data, and the states read off their screens."""

from __future__ import annotations

from politerm.agents.profile import (
    AgentProfile,
    Detectors,
    Dialog,
    guess_profile,
    list_profiles,
    load_profile,
)
from politerm.agents.state import AgentState, StateReading

__all__ = [
    "AgentProfile",
    "AgentState",
    "Detectors",
    "Dialog",
    "StateReading",
    "guess_profile",
    "list_profiles",
    "load_profile",
]
