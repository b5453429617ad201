"""A live mirror of one pane: its first screen from a capture, then tmux's ``%output`` bytes.

Views start one through :meth:`politerm.driver.observer.Observer.mirror`. Nothing is
polled. The control-mode connection already receives every byte the agent writes
(:meth:`politerm.tmux.control.ControlClient.subscribe`); a mirror starts from
``capture-pane -e`` (colours and attributes kept) turned into an escape sequence that paints
that screen (on the alternate screen: the normal one first, from ``capture-pane -a``), and
then passes the raw bytes on: to xterm.js in the browser, or to a pyte screen in the
terminal dashboard.

A capture and the byte stream race: output that tmux sends while the capture is in flight
may or may not be in it. :func:`start_mirror` therefore takes the capture again when any
output arrived during one (bounded), so the painted screen and the bytes that follow join
without a gap or a repeat.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from politerm.tmux.pane import Pane

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.tmux import ControlClient, TmuxServer

Sink = t.Callable[[bytes], None]

_CAPTURE_TRIES = 5


def paint(
    lines: t.Sequence[str],
    cursor: tuple[int, int],
    *,
    alternate: bool = False,
    underneath: t.Sequence[str] = (),
) -> bytes:
    r"""Escape bytes that paint ``lines`` (from ``capture-pane -e``) on a cleared terminal.

    On the alternate screen, ``underneath`` (the normal screen, ``capture-pane -a``) is
    painted first, so the mirror shows it again when the program leaves the alternate screen.

    Examples
    --------
    >>> paint(["a", "\x1b[31mb\x1b[39m"], (1, 1))
    b'\x1b[0m\x1b[H\x1b[2Ja\r\n\x1b[31mb\x1b[39m\x1b[0m\x1b[2;2H'
    >>> paint(["x"], (0, 0), alternate=True, underneath=["n"])
    b'\x1b[0m\x1b[H\x1b[2Jn\x1b[0m\x1b[?1049h\x1b[0m\x1b[H\x1b[2Jx\x1b[0m\x1b[1;1H'
    """

    def screen(rows: t.Sequence[str]) -> bytes:
        return b"\x1b[0m\x1b[H\x1b[2J" + "\r\n".join(rows).encode("utf-8", errors="replace")

    head = screen(underneath) + b"\x1b[0m\x1b[?1049h" if alternate else b""
    x, y = cursor
    return head + screen(lines) + b"\x1b[0m" + f"\x1b[{y + 1};{x + 1}H".encode()


@dataclasses.dataclass
class Mirror:
    """A running mirror: its first screen and the pane's size, then bytes to ``sink``."""

    pane_id: str
    width: int
    height: int
    initial: bytes
    stop: Callable[[], None]
    alternate: bool = False


async def start_mirror(
    client: ControlClient, server: TmuxServer, pane_id: str, sink: Sink
) -> Mirror:
    """Capture ``pane_id`` and stream its output to ``sink`` from where the capture ends.

    ``sink`` first receives nothing; the caller sends :attr:`Mirror.initial` itself (so it
    can also send the size first), then every later chunk arrives through ``sink`` in order.

    Raises
    ------
    PaneNotFound
        When the pane is gone.
    """
    pane = Pane(client, pane_id, server)
    held: list[tuple[float, bytes]] = []
    live = False

    def on_output(_pid: str, data: bytes) -> None:
        if live:
            sink(data)
        else:
            held.append((time.monotonic(), data))

    unsubscribe = client.feeds.subscribe(pane_id, on_output)
    try:
        for attempt in range(_CAPTURE_TRIES):
            held.clear()
            sent = time.monotonic()
            info = await pane.info()
            lines = await pane.capture(escapes=True, join=False)
            # On the alternate screen, the normal one is kept aside: -a reads it.
            normal = (
                await client.cmd("capture-pane", "-p", "-e", "-a", "-q", "-t", pane_id)
                if info.alternate_on
                else []
            )
            back = time.monotonic()
            racing = [d for ts, d in held if ts >= sent]
            if not racing or attempt == _CAPTURE_TRIES - 1:
                break
        # Output after the last capture returned is not in it; nothing else is kept.
        later = [d for ts, d in held if ts > back]
        cursor = (info.cursor_x, info.cursor_y)
        initial = paint(lines, cursor, alternate=info.alternate_on, underneath=normal)
        initial += b"".join(later)
        live = True
    except BaseException:
        unsubscribe()
        raise
    return Mirror(pane_id, info.width, info.height, initial, unsubscribe, info.alternate_on)
