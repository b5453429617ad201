"""``poli dash``: the terminal dashboard."""

from __future__ import annotations

from politerm.driver.panes import attach_argv
from politerm.ui.dash.app import DashApp

__all__ = ["DashApp", "attach_argv"]
