"""Headless runner: an agent CLI in a pseudo-terminal, and the live view of it."""

from __future__ import annotations

from politerm.pty.runner import PtyTerminal, key_bytes, no_pty_message

__all__ = ["PtyTerminal", "key_bytes", "no_pty_message"]
