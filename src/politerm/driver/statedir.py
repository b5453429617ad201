"""Where politerm keeps per-server files (tmux configs, session and service locks).

A module of its own so that reading a lock (``poli status`` asks whether the router runs)
does not import :mod:`politerm.driver.host` and with it the whole turn machinery.
"""

from __future__ import annotations

import typing as t

from politerm.tmux.server import default_config_dir

if t.TYPE_CHECKING:
    import pathlib


def state_dir() -> pathlib.Path:
    """Where politerm keeps per-server files (tmux configs, session locks)."""
    return default_config_dir()
