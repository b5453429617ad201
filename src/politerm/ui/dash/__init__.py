"""``poli dash``: the terminal dashboard."""

from __future__ import annotations

from politerm.ui.dash.app import DashApp, attach_argv

__all__ = ["DashApp", "attach_argv"]
