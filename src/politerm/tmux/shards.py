"""A session spread over several private tmux servers: the shards' names and sockets.

tmux on Linux waits for its panes with poll(2), so every pass of a server's loop costs
time in proportion to all of its panes: one command's round trip took 23 µs with 10 panes
and 525 µs with 500 (docs/performance.md). A session with many agents therefore runs them
on several servers of a few dozen panes each. Shard 0 is the server the configuration
names (``[tmux] socket``), so a session that fits in one shard is what it always was; shard
``k`` (``k >= 1``) has the socket ``<socket>-<session>-<k>``, which names its session too.
"""

from __future__ import annotations

import os
import pathlib
import re

SHARD_WINDOW = "shard"
"""The first window of a shard's session (a dead pane: the agents have the others)."""


def shard_socket(base: str, session: str, index: int) -> str:
    """The socket name of shard ``index`` of ``session`` on the servers named ``base``.

    Examples
    --------
    >>> shard_socket("poli", "proj", 0), shard_socket("poli", "proj", 2)
    ('poli', 'poli-proj-2')
    """
    return base if index == 0 else f"{base}-{session}-{index}"


def shard_index(base: str, session: str, socket: str) -> int | None:
    """Which shard of ``session`` the server on ``socket`` is; None if it is none of them.

    Examples
    --------
    >>> shard_index("poli", "proj", "poli"), shard_index("poli", "proj", "poli-proj-12")
    (0, 12)
    >>> shard_index("poli", "proj", "poli-other-1") is None
    True
    """
    if socket == base:
        return 0
    match = re.fullmatch(rf"{re.escape(base)}-{re.escape(session)}-([1-9][0-9]*)", socket)
    return int(match[1]) if match else None


def socket_dir() -> pathlib.Path:
    """The directory of this user's tmux sockets (``$TMUX_TMPDIR`` or /tmp, ``tmux-<uid>``)."""
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"  # tmux's own default
    return pathlib.Path(base) / f"tmux-{os.getuid()}"


def shard_sockets(base: str, session: str | None = None) -> list[str]:
    """The shard sockets (``k >= 1``) that have a socket file, of ``session`` or of any.

    A socket file is only a hint: a server killed with ``kill -9`` leaves its file behind,
    so a caller still finds out whether the server answers. Sorted by session, then shard.
    """
    name = re.escape(session) if session is not None else r"[^:.\s]+"
    pattern = re.compile(rf"{re.escape(base)}-({name})-([1-9][0-9]*)")
    try:
        entries = [p.name for p in socket_dir().iterdir()]
    except OSError:
        return []
    found = [(m[1], int(m[2]), e) for e in entries if (m := pattern.fullmatch(e))]
    return [socket for _, _, socket in sorted(found)]


__all__ = ["SHARD_WINDOW", "shard_index", "shard_socket", "shard_sockets", "socket_dir"]
