"""Agents: profiles as data, the states read off their screens, and approval policy."""

from __future__ import annotations

import typing as t

from politerm._internal.lazy import lazy_names

if t.TYPE_CHECKING:
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

# Imported on first use: ``agents.state`` and ``agents.approval`` are read by the views, which
# should not pay for the profiles' detectors and their protocol parsers to start.
_LAZY = {
    "AgentProfile": "profile",
    "ApprovalRequest": "profile",
    "ApprovalSpec": "profile",
    "Detectors": "profile",
    "Dialog": "profile",
    "Rendering": "profile",
    "TranscriptSpec": "profile",
    "guess_profile": "profile",
    "list_profiles": "profile",
    "load_profile": "profile",
    "AgentState": "state",
    "StateReading": "state",
    "StateTracker": "tracker",
}

__getattr__ = lazy_names(__name__, _LAZY)


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
