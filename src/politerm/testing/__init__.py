"""Test support shipped with politerm: the scripted fake agent TUI and bounded waits."""

from __future__ import annotations
