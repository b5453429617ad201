"""tmux layer: a private server, a persistent control-mode client, and panes."""

from __future__ import annotations

from politerm.tmux.control import ControlClient, Notification
from politerm.tmux.pane import (
    Pane,
    PaneInfo,
    agent_panes,
    find_agent_pane,
    find_pane_running,
    new_window,
    split_pane,
)
from politerm.tmux.server import TmuxServer

__all__ = [
    "ControlClient",
    "Notification",
    "Pane",
    "PaneInfo",
    "TmuxServer",
    "agent_panes",
    "find_agent_pane",
    "find_pane_running",
    "new_window",
    "split_pane",
]
