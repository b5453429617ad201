"""Receipts from the agents' own events: hooks politerm installs, and the channel they use.

Layer: below ``driver/`` (which reads the receipts), above ``redact`` and ``_internal``.
:mod:`~politerm.hooks.install` puts the hook command in an agent CLI's session
configuration, :mod:`~politerm.hooks.emit` is that command, :mod:`~politerm.hooks.channel`
creates and reads the private file it appends to, and :mod:`~politerm.hooks.events` is the
receipt format.

Nothing is imported here: the hook command runs on every agent event and must start fast.
"""

from __future__ import annotations
