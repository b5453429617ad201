"""A live view's frame redrawn line by line, in a real terminal (a tmux pane)."""

from __future__ import annotations

import json
import sys
import typing as t

from politerm.testing.retry import WaitTimeout, aretry_until
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    import pathlib

    from politerm.tmux import ControlClient, Pane, TmuxServer

FRAMES = [
    ["title", "row 1", "row 2", "row 3", "end"],
    ["title", "row 1", "row 2 changed", "row 3", "end"],
    ["title", "row 1", "row 2", "row 3", "row 4", "row 5", "end"],  # taller
    ["title", "short"],  # shorter: the rest is cleared
    ["title", "\x1b[1mbold\x1b[0m and longer than before"],
    [f"line {i}" for i in range(30)],  # taller than the terminal: cut, then "…"
    ["last", "frame"],
]

SCRIPT = """
import json, os, signal, sys, time
from politerm._internal.lineframe import LineFrame
frames, report = json.loads(sys.argv[1]), sys.argv[2]
# The window gets its size after the script started: wait for the SIGWINCH that says so
# (blocked first, so one sent between the check and the wait is kept, not lost).
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
deadline = time.monotonic() + 30
while tuple(os.get_terminal_size()) != (60, 20):
    left = deadline - time.monotonic()
    if left <= 0 or signal.sigtimedwait({signal.SIGWINCH}, left) is None:
        sys.exit(f"the window never got its size 60x20: {tuple(os.get_terminal_size())}")
frame = LineFrame(sys.stdout, height=20)
written = []
for lines in frames:
    before = frame.written
    frame.draw(lines)
    written.append(frame.written - before)
with open(report + ".part", "w") as out:
    json.dump(written, out)
os.rename(report + ".part", report)
time.sleep(600)
"""


async def _until_shown(pane: Pane, want: list[str], report: pathlib.Path, what: str) -> None:
    """Until the script is done and tmux shows ``want`` (the last screen in the error)."""
    seen: list[str] = []

    async def shown() -> bool:
        nonlocal seen
        seen = [ln.rstrip() for ln in await pane.capture()]
        return report.exists() and seen == want

    try:
        await aretry_until(shown, 60, what=what)
    except WaitTimeout:
        raise AssertionError(seen) from None


def _plain(line: str) -> str:
    return line.replace("\x1b[1m", "").replace("\x1b[0m", "")


async def test_each_frame_shows_as_drawn_whole_writing_only_changed_lines(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    report = tmp_path / "written.json"
    script = tmp_path / "frames.py"
    script.write_text(SCRIPT)
    for n, frame in enumerate(FRAMES, start=1):
        # Each prefix of the frames in a fresh pane: the screen after the last one drawn
        # must be that frame alone, from the top, as if drawn whole on an empty screen.
        argv = [sys.executable, str(script), json.dumps(FRAMES[:n]), str(report)]
        report.unlink(missing_ok=True)
        pane = await new_window(
            tmux_session, tmux_server, session="t", name=f"f{n}", argv=argv,
            agent=f"F{n}", size=(60, 20),
        )  # fmt: skip
        want = [*frame[:19], "…"] if len(frame) > 20 else [_plain(ln) for ln in frame]
        want += [""] * (20 - len(want))
        await _until_shown(pane, want, report, f"frame {n} alone on the screen")
        await pane.kill()
    # One line changed: one line written; a frame after a taller one writes its own lines.
    assert json.loads(report.read_text()) == [5, 1, 4, 1, 1, 20, 2]
