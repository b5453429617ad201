"""A pipeline step's own page shows its open approval (it asks as ``<run>.step-<n>``)."""

from __future__ import annotations

import subprocess
import typing as t

from politerm.agents.approval import PendingApproval, set_pending
from politerm.config import load_config
from politerm.pipeline.state import RunRecord, RunState
from politerm.store import RunStore
from tests.ui.uihelpers import base_and_token, browser, web

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def _step_pane(socket: str) -> str:
    """A pane tagged ``step-1`` in the session pipeline run r7 records; its id."""
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", "poli-proj-r7", "sleep 600"], check=True)
    subprocess.run([*tmux, "set-option", "-p", "-t", "poli-proj-r7", "@poli_agent", "step-1"],
                   check=True)  # fmt: skip
    return subprocess.run(
        [*tmux, "display-message", "-p", "-t", "poli-proj-r7", "#{pane_id}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


async def test_a_steps_page_shows_its_approval_and_waiting_state(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    socket = server.socket_name
    assert socket is not None
    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n')
    config = load_config(root, env={})
    pane = _step_pane(socket)
    with RunStore.for_config(config) as store:
        record = RunRecord(
            run_id="r7", pipeline="feature", pipeline_name="feature", project=str(root.resolve()),
            task="build it", session="poli-proj-r7", socket=socket, cli="fake",
        )  # fmt: skip
        record.step(1)
        RunState(store, record).save()
        asks = ("Bash command", "npm test", "Do you want to proceed?")
        set_pending(store, PendingApproval("r7.step-1", "Bash", "npm test", asks, 3.0))
    async with browser() as b:
        with web(root) as url:
            base, token = base_and_token(url)
            page = await b.new_page()
            await page.goto(f"{base}/agent/{pane}?token={token}")
            row = page.locator("#approvals tr", has_text="npm test")
            await row.wait_for(timeout=30_000)
            assert "r7.step-1" in await row.inner_text()
            await page.locator("#agent-state.state-waiting_approval").wait_for(timeout=10_000)
            assert await page.locator("#agent-name").inner_text() == "step-1"
