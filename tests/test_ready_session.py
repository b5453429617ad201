"""A CLI that draws its input box before its session-start hook ran is not ready yet.

Gemini CLI 0.61.0, resumed under load: the input box is drawn, then
``Executing Hook: poli-receipt-SessionStart`` shows for seconds, and a prompt submitted
before the hook ran is dropped (no request, no receipt). The start-up wait holds a ready
screen until the session receipt came (bounded: hooks that never run do not block).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import typing as t

from politerm.agents import load_profile
from politerm.agents.state import AgentState
from politerm.driver import ready
from politerm.driver.receipts import Receipts
from politerm.hooks.channel import create_channel
from politerm.hooks.install import emit_argv
from politerm.testing.retry import aretry_until
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    import pathlib

    import pytest

    from politerm.agents.state import StateReading
    from politerm.tmux import ControlClient, Pane, TmuxServer

READY_LINE = " >   Type your message or @path/to/file"


async def _box(client: ControlClient, server: TmuxServer) -> Pane:
    """A pane that shows Gemini's input box and nothing more."""
    script = f"printf '{READY_LINE}\\n'; sleep 600"
    return await new_window(client, server, session="t", name="gem", argv=["sh", "-c", script])


def _session_start(channel: pathlib.Path) -> None:
    """Write the SessionStart receipt as the CLI's hook does."""
    payload = json.dumps({"session_id": "s1", "source": "resume"}).encode()
    argv = emit_argv(channel, "gemini", "SessionStart")
    subprocess.run(argv, input=payload, capture_output=True, timeout=60, check=True)


async def test_a_ready_box_waits_for_the_session_receipt(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    channel = create_channel(tmp_path / "hooks", "A")
    _session_start(channel)  # a dead predecessor's receipt: before the launch, not counted
    receipts = Receipts.open("gemini", channel)
    pane = await _box(tmux_session, tmux_server)
    readings: list[StateReading] = []
    waiting = asyncio.ensure_future(
        ready.wait_ready(
            pane, load_profile("gemini"), timeout=60, receipts=receipts,
            on_reading=readings.append,
        )
    )  # fmt: skip

    async def held() -> bool:
        return sum(r.state is AgentState.READY for r in readings) >= 3

    await aretry_until(held, 30, what="three ready readings")
    assert not waiting.done()  # the box is drawn, the session has not started
    _session_start(channel)
    reading = await asyncio.wait_for(waiting, 30)
    assert reading.state is AgentState.READY
    await receipts.close()


async def test_hooks_that_never_report_do_not_block_the_start(
    tmux_session: ControlClient,
    tmux_server: TmuxServer,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ready, "SESSION_GRACE", 0.5)
    receipts = Receipts.open("gemini", create_channel(tmp_path / "hooks", "A"))
    pane = await _box(tmux_session, tmux_server)
    reading = await ready.wait_ready(pane, load_profile("gemini"), timeout=60, receipts=receipts)
    assert reading.state is AgentState.READY
    assert not receipts.since(0)
