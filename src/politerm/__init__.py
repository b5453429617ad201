"""politerm: run AI coding agents as long-lived TUIs in tmux and drive them unattended."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
