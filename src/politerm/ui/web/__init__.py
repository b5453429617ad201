"""``poli web``: the browser monitor (overview, live panes in xterm.js, event stream)."""

from __future__ import annotations

from politerm.ui.web.app import WebMonitor, new_token
from politerm.ui.web.serve import serve

__all__ = ["WebMonitor", "new_token", "serve"]
