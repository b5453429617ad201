"""``poli web`` in a real browser (playwright + Debian's chromium) over real fake agents."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import typing as t

import httpx
import psutil
import pytest
import websockets
from playwright.async_api import TimeoutError as PlaywrightTimeout

from politerm.cli._common import VIEW_NICENESS
from politerm.store.limits import begin_limit
from politerm.testing.retry import retry_until
from tests.loophelpers import started
from tests.ui.uihelpers import (
    WEB_OUTPUT,
    ask_project,
    base_and_token,
    browser,
    poli,
    screenshot_path,
    web,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


async def test_every_request_and_websocket_needs_the_token(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root):
        with web(root) as url:
            base, token = base_and_token(url)
            async with httpx.AsyncClient() as client:
                for path in ("/", "/api/overview", "/agent/PLANNER", "/events", "/static/poli.js",
                             "/xterm/@xterm/xterm/lib/xterm.js"):  # fmt: skip
                    refused = await client.get(base + path)
                    assert refused.status_code == 401, path
                    wrong = await client.get(base + path, params={"token": token + "x"})
                    assert wrong.status_code == 401, path
                ok = await client.get(base + "/api/overview", params={"token": token})
                assert ok.status_code == 200
                assert {a["name"] for a in ok.json()["agents"]} >= {"PLANNER", "EXECUTER"}
                # read-only: actions are refused without --allow-actions
                act = await client.post(
                    base + "/api/approve",
                    headers={"X-Poli-Token": token},
                    json={"agent": "EXECUTER", "asked": 1.0, "command": "x"},
                )
                assert act.status_code == 403
                assert "read-only" in act.json()["error"]
                # a page of another origin is refused, whatever it carries
                cross = await client.post(
                    base + "/api/approve",
                    headers={"X-Poli-Token": token, "Origin": "http://evil.example"},
                    json={"agent": "EXECUTER", "asked": 1.0, "command": "x"},
                )
                assert cross.status_code == 403
                assert cross.json()["error"] == "refused: not from this monitor's own page"
            ws_base = base.replace("http://", "ws://")
            for ws_path in ("/ws/overview", "/ws/pane/PLANNER", f"/ws/pane/PLANNER?token={token}x"):
                with pytest.raises(websockets.InvalidStatus):
                    async with websockets.connect(ws_base + ws_path):
                        pass
            async with websockets.connect(f"{ws_base}/ws/overview?token={token}") as ws:
                data = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert "agents" in data


async def test_binding_beyond_loopback_needs_remote_and_a_token_is_long(
    tmp_path: pathlib.Path,
) -> None:
    proc = poli(tmp_path, "web", "--host", "0.0.0.0")
    _, err = await asyncio.to_thread(proc.communicate, None, 30)
    assert proc.returncode == 1
    assert err.strip().startswith("poli: --host 0.0.0.0 listens beyond this machine: use --remote")
    assert "Traceback" not in err
    for args, said in (
        (("--token", "short"), "poli: --token must be at least 16 characters"),
        (("--port", "99999"), "Error: Invalid value for '--port': 99999 is not in the range"),
    ):
        proc = poli(tmp_path, "web", *args)
        _, err = await asyncio.to_thread(proc.communicate, None, 30)
        last = err.strip().splitlines()[-1]
        assert proc.returncode != 0 and last.startswith(said), (args, err)
        assert "Traceback" not in err and "internal error" not in err


async def test_xterm_js_is_found_where_poli_web_assets_says_or_the_error_says_how(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.ui.web.assets import node_modules

    empty = tmp_path / "empty"
    empty.mkdir()
    proc = poli(tmp_path, "web", env={"POLI_WEB_ASSETS": str(empty)})
    _, err = await asyncio.to_thread(proc.communicate, None, 30)
    assert proc.returncode == 1, err
    [line] = err.strip().splitlines()
    assert line.startswith(f"poli: xterm.js is not installed (looked in {empty}/node_modules)")
    assert line.endswith(f"run `python -m politerm.ui.web {empty}`, or unset POLI_WEB_ASSETS")
    # an install elsewhere (as the setup script makes it, from the npm registry) is served
    installed = node_modules().parent
    with web(tmp_path, env={"POLI_WEB_ASSETS": str(installed)}) as url:
        base, token = base_and_token(url)
        async with httpx.AsyncClient() as client:
            got = await client.get(
                base + "/xterm/@xterm/xterm/lib/xterm.js", params={"token": token}
            )
    assert got.status_code == 200
    assert got.content == (installed / "node_modules/@xterm/xterm/lib/xterm.js").read_bytes()


async def test_mirror_shows_what_the_agent_prints_within_a_second(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root) as loop, browser() as b:
        with web(root) as url:
            base, token = base_and_token(url)
            pane_id = loop.store.get_agent("PLANNER").pane_id  # type: ignore[union-attr]
            page = await b.new_page(viewport={"width": 1700, "height": 1000})
            await page.goto(f"{base}/agent/PLANNER?token={token}")
            # the first screen comes from a capture: the fake agent's input box is on it
            await page.wait_for_function(
                "() => window.poliTerm && window.poliFrames > 0", timeout=15_000
            )
            pane = (await loop.session.host.agent_panes())["PLANNER"]
            assert pane.pane_id == pane_id
            marker = "mirror-check-7731"
            await pane.paste(marker.encode())
            # xterm.js has rendered the text the agent echoed: within the second
            await page.wait_for_function(
                """(m) => {
                    const b = window.poliTerm.buffer.active;
                    for (let i = 0; i < b.length; i++) {
                        const l = b.getLine(i);
                        if (l && l.translateToString().includes(m)) return true;
                    }
                    return false;
                }""",
                arg=marker,
                timeout=1_000,
            )
            assert marker in await page.locator(".xterm-rows").inner_text()
            await page.screenshot(path=str(screenshot_path(tmp_path, "web-agent.png")))


async def test_approving_from_the_page_answers_the_agent(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root) as loop, browser() as b:
        with web(root, "--allow-actions") as url:
            base, token = base_and_token(url)
            page = await b.new_page(viewport={"width": 1500, "height": 1100})
            await page.goto(f"{base}/?token={token}")
            router = poli(root, "task", "make hello", "--id", "T-web", "--timeout", "90")
            try:
                approve = page.locator("#inbox button.approve")
                await approve.wait_for(state="visible", timeout=60_000)
                row = approve.locator("xpath=ancestor::li")
                assert "echo hi > out.txt" in await row.inner_text()
                await page.screenshot(path=str(screenshot_path(tmp_path, "web-overview.png")))
                pending = json.loads(loop.store.get_meta("approval:EXECUTER") or "{}")
                await approve.click()
                await page.locator("#confirm button.yes").click()  # asked first
                await page.wait_for_function(
                    "() => document.getElementById('status').textContent.startsWith('approved')",
                    timeout=10_000,
                )
                await asyncio.to_thread(
                    retry_until,
                    lambda: (root / "executer" / "out.txt").is_file(),
                    60,
                    what="the executer wrote out.txt after the approval",
                )
                out, err = await asyncio.to_thread(router.communicate, None, 90)
                assert router.returncode == 0, (out, err)
            finally:
                if router.poll() is None:
                    router.kill()
            task = loop.store.get_task("T-web")
            assert task is not None and task.state.value == "done"
            approvals = [e for e in loop.log("EXECUTER") if e["event"] == "approval"]
            assert approvals and approvals[-1]["approved"] is True, approvals
            kinds = [e.kind for e in loop.store.list_events(limit=200)]
            assert "ui-action" in kinds and "approval-answer" in kinds
            # the keys pressed for it are logged as the page's answer, not `poli approve`'s
            [given] = [
                e for e in loop.store.list_events(limit=200)
                if e.kind == "approval" and e.data.get("by") == "user"
            ]  # fmt: skip
            assert given.data["origin"] == "web", given.detail
            assert "answered from the web page" in given.detail
            # the same button again is stale: the question it was drawn for is gone
            async with httpx.AsyncClient() as client:
                again = await client.post(
                    base + "/api/approve",
                    headers={"X-Poli-Token": token},
                    json={"agent": "EXECUTER", "asked": pending["asked"],
                          "command": pending["command"]},
                )  # fmt: skip
            assert again.status_code == 409
            assert "EXECUTER" in again.json()["error"]


async def test_overview_page_shows_when_a_limited_agent_resets(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root) as loop, browser() as b:
        now = time.time()
        begin_limit(loop.store, "PLANNER", since=now, until=now + 7200, shown=True)
        loop.store.set_agent_state("PLANNER", "limited")
        at = datetime.datetime.fromtimestamp(now + 7200).strftime("%H:%M:%S")
        with web(root) as url:
            base, token = base_and_token(url)
            page = await b.new_page()
            await page.goto(f"{base}/?token={token}")
            cell = page.locator("#agents td.state-limited")
            await cell.wait_for(state="visible", timeout=60_000)
            assert (await cell.inner_text()).startswith(f"limited · resets {at}")
            await page.goto(f"{base}/agent/PLANNER?token={token}")
            await page.wait_for_function(
                "(at) => document.getElementById('agent-state').textContent.includes(at)",
                arg=at,
                timeout=60_000,
            )


async def test_one_agent_changing_redraws_its_row_only(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    from politerm.store import RunStore

    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{_socket(server)}"\n\n[store]\npath = "r.sqlite3"\n'
    )
    agents = [f"IDLE{i:02d}" for i in range(40)]
    with RunStore.open(root / "r.sqlite3") as store:
        with store.batch():
            for i, name in enumerate(agents):
                store.upsert_agent(
                    name, session="s", pane_id=f"%{i}", command="x", cwd=".",
                    profile="fake-plain", resume_command=None,
                )  # fmt: skip
                store.set_agent_state(name, "ready")
        async with browser() as b:
            with web(root) as url:
                base, token = base_and_token(url)
                page = await b.new_page(viewport={"width": 1500, "height": 1100})
                await page.goto(f"{base}/?token={token}")
                await page.wait_for_function(
                    "() => document.querySelectorAll('#agents tr').length === 41",
                    timeout=60_000,
                )
                await page.evaluate(
                    """() => {
                        window.drawnRows = 0;
                        new MutationObserver((changes) => {
                            for (const c of changes) window.drawnRows += c.addedNodes.length;
                        }).observe(document.getElementById('agents'), { childList: true });
                    }"""
                )
                store.set_agent_state("IDLE07", "busy")
                try:
                    await page.wait_for_function(
                        "() => document.querySelector('#agents td.state-busy') !== null",
                        timeout=60_000,
                    )
                except PlaywrightTimeout:
                    async with httpx.AsyncClient() as http:
                        got = await http.get(f"{base}/api/overview", params={"token": token})
                    served = got.json()
                    said = [a["state"] for a in served["agents"] if a["name"] == "IDLE07"]
                    pytest.fail(
                        f"the page never showed IDLE07 busy; the server says {said}; "
                        f"poli web printed {WEB_OUTPUT.get(url)}"
                    )
                row = page.locator("#agents td.state-busy").locator("xpath=ancestor::tr")
                assert "IDLE07" in await row.inner_text()
                assert await page.locator("#agents tr").count() == 41
                # Before, every update redrew the header and all 40 rows.
                assert await page.evaluate("window.drawnRows") == 1
                store.set_agent_state("IDLE07", "ready")
                await page.wait_for_function(
                    "() => document.querySelector('#agents td.state-busy') === null",
                    timeout=60_000,
                )
                assert await page.evaluate("window.drawnRows") == 2
                # The server sends that one row too, not the overview's 40 (ui/web/delta.py).
                ws_url = base.replace("http://", "ws://") + f"/ws/overview?token={token}"
                async with websockets.connect(ws_url) as ws:
                    first = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert len(first["agents"]) == 40 and "delta" not in first
                    store.set_agent_state("IDLE12", "busy")
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    assert "agents" not in frame["delta"]
                    changed = frame["rows"]["agents"]
                    assert changed["len"] == 40 and list(changed["at"]) == ["12"]
                    assert changed["at"]["12"]["name"] == "IDLE12"
                    assert changed["at"]["12"]["state"] == "busy"


async def test_the_monitor_stands_back_for_the_router_and_agents(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # Its redraws grow with the rows (500 agents: tens of ms a commit): at the router's
    # priority they stretched the very handoffs the page shows.
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root):
        proc = poli(root, "web")
        try:
            assert proc.stdout is not None
            assert "http://" in proc.stdout.readline()
            assert psutil.Process(proc.pid).nice() == VIEW_NICENESS
            assert psutil.Process().nice() < VIEW_NICENESS
        finally:
            proc.terminate()
            proc.wait(15)
