"""A CLI that restarts itself between start-up dialogs is not ready until the last is answered."""

from __future__ import annotations

import typing as t

from politerm.agents import load_profile
from politerm.agents.state import AgentState
from politerm.driver.ready import wait_ready
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    import pathlib

    from politerm.tmux import ControlClient, TmuxServer

READY_LINE = " >   Type your message or @path/to/file"

# Gemini's first run, as seen with 0.61.0: the trust dialog, a restart that draws the input
# box for a moment, then the API-key dialog, then the real input box.
SCRIPT = f"""
home() {{ printf '\\033[2J\\033[H'; }}
home; printf 'Do you trust the files in this folder?\\n'; read a
home; printf '{READY_LINE}\\n'; sleep 1
home; printf 'Enter Gemini API Key\\n'; read b
home; printf 'key dialog answered\\n{READY_LINE}\\n'; sleep 600
"""


async def test_ready_holds_after_a_dialog_before_it_counts(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "first-run.sh").write_text(SCRIPT)
    pane = await new_window(
        tmux_session,
        tmux_server,
        session="t",
        name="gem",
        argv=["sh", str(tmp_path / "first-run.sh")],
    )
    profile = load_profile("gemini")
    assert profile.dialog_settle > 1  # longer than the restart's input box shows
    answered: list[str] = []
    reading = await wait_ready(
        pane, profile, timeout=60, name="gem", on_dialog=lambda name, _keys: answered.append(name)
    )
    assert reading.state is AgentState.READY
    assert answered == ["folder-trust", "api-key"]
    lines = (await pane.snapshot()).lines
    assert any("key dialog answered" in ln for ln in lines), lines
