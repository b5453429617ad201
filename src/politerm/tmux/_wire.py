"""The wire pieces of tmux control mode: reply guards, notifications, pending replies.

Shared by :class:`politerm.tmux.control.ControlClient`; kept apart so the client holds only
the connection's logic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shlex
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence

_GUARD = re.compile(rb"^%(begin|end|error) (\d+) (\d+) (\d+)$")
_PANE_MISSING = re.compile(r"can't find pane:? ?(%\d+)?|no such pane")
_SESSION_MISSING = re.compile(r"can't find session|no such session|session not found")
_SERVER_GONE = re.compile(
    r"no server running|error connecting to|server exited|lost server", re.IGNORECASE
)

# A pane whose program dies prints nothing more, so no %output tells anyone, and tmux sends
# control clients no notice of its own. A driver's connection subscribes to #{pane_dead} of
# every pane (_DEAD_SUB), which tmux formats once a second per pane and per client (issue 25:
# 1.09 % of a core for 500 idle agents with three processes watching). The views need not:
# the pane-died hook (remain-on-exit keeps such a pane) renames the pane's window to the
# name it has, which tmux announces to every control client as %window-renamed, costing
# nothing until a pane dies. Commands a hook runs announce nothing, so the hook renames as a
# client of its own (run-shell -b). tmux does not always run the hook (a program killed
# right after its start), so a driver's connection that sees a death renames too, and so
# does a respawn (SAME_NAME).
_DEAD_SUB = "poli-dead"
SAME_NAME = "#{window_name}"
"""``rename-window -t PANE`` to this format: the window keeps its name, tmux announces it."""


def death_hook(tmux: str) -> str:
    """The ``pane-died`` hook's command: the dead pane's window renamed to its own name.

    ``tmux`` is the binary the client runs (the hook's shell finds it on its own ``PATH``
    otherwise).

    >>> print(death_hook("tmux"))
    run-shell -b "tmux -S #{q:socket_path} rename-window -t #{pane_id} '##{window_name}'"
    """
    # run-shell expands formats first ("##" stays a "#" for rename-window to expand).
    shell = (
        f"{shlex.quote(tmux)} -S #{{q:socket_path}} rename-window -t #{{pane_id}} '#{SAME_NAME}'"
    )
    return f'run-shell -b "{shell}"'


OutputCallback = t.Callable[[str, bytes], None]
NotificationCallback = t.Callable[["Notification"], None]


@dataclasses.dataclass(frozen=True)
class Notification:
    """A ``%``-line tmux sent unasked, e.g. ``%window-close @3``."""

    name: str
    args: tuple[str, ...]


@dataclasses.dataclass
class _Pending:
    line: str
    future: asyncio.Future[list[str]]
    sent_at: float


async def _first(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


def _target_of(line: str) -> str:
    parts: Sequence[str] = line.split()
    for i, part in enumerate(parts[:-1]):
        if part == "-t":
            return parts[i + 1]
    return "?"


class _Lines:
    r"""Complete lines (without their newline) out of a byte stream read in chunks.

    One read per burst, then a split, instead of one ``readline`` per line: a capture is
    some fifty lines, and a burst of ``%output`` as many.

    Examples
    --------
    >>> lines = _Lines()
    >>> lines.feed(b"%begin 1 2 1\nab"), lines.feed(b"c"), lines.feed(b"d\n%end 1 2 1\n")
    ([b'%begin 1 2 1'], [], [b'abcd', b'%end 1 2 1'])
    >>> lines.feed(b"last"), lines.feed(b"")  # the end of the stream ends the last line
    ([], [b'last'])
    """

    def __init__(self) -> None:
        self._partial: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes; ``b""`` (end of stream) completes the last one."""
        if not chunk:
            rest, self._partial = b"".join(self._partial), []
            return [rest] if rest else []
        if b"\n" not in chunk:
            self._partial.append(chunk)
            return []
        if self._partial:
            self._partial.append(chunk)
            chunk = b"".join(self._partial)
        *lines, tail = chunk.split(b"\n")
        self._partial = [tail] if tail else []
        return lines


def _decoded(raw: list[bytes]) -> list[str]:
    r"""The lines of a reply as text: decoded at once, not line by line (the same result).

    Examples
    --------
    >>> _decoded([b"\xe2\x9d\xaf ok", b"cut \xe2\x9d", b""]), _decoded([])
    (['❯ ok', 'cut \ufffd', ''], [])
    """
    return b"\n".join(raw).decode("utf-8", errors="replace").split("\n") if raw else []
