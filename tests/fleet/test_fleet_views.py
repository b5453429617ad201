"""The whole fleet on any node: ``poli status``, ``poli web`` and ``poli dash`` (issue 22).

Real redis-server, real ``poli`` processes per node (each its own HOME, tmux server and
store), the fake agents; what each agent was handed or answered is read from its own log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import typing as t

import httpx
import pytest

from politerm.config import load_config
from politerm.testing.retry import aretry_until, retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.loophelpers import EXECUTER_OK
from tests.ui.uihelpers import base_and_token, browser, web

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow

ASKS = EXECUTER_OK.replace("write_file =", 'approval = "echo hi > ran.txt"\nwrite_file =')
"""EXECUTER asks to run a command before it answers (approval "ask": a person decides)."""


def _agents(node: FleetNode) -> dict[str, dict[str, t.Any]]:
    """``poli status --json`` on ``node``: its agents by name."""
    shown = node.poli("status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return {a["name"]: a for a in json.loads(shown.stdout)["agents"]}


def _task_of(node: FleetNode, task_id: str) -> dict[str, t.Any] | None:
    shown = node.poli("status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return next((tk for tk in json.loads(shown.stdout)["tasks"] if tk["id"] == task_id), None)


@contextlib.asynccontextmanager
async def _asking(tmp_path: pathlib.Path, redis_server: RedisServer) -> t.AsyncIterator[FleetNode]:
    """PLANNER on a, EXECUTER on b asking before it answers; task T-1 running from a.

    Yields node a; afterwards T-1 has finished and EXECUTER's own log on b shows one
    answer, yes.
    """
    ask = '[routing]\napproval = "ask"\n[notify]\ndesktop = false\n'
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=ASKS, extra=ask)
    a, b = nodes["a"], nodes["b"]
    task = None
    try:
        b.start_node()
        assert (await asyncio.to_thread(a.poli, "up")).returncode == 0
        task = a.start("task", "make hello", "--id", "T-1", "--timeout", "120")
        yield a
        out, _ = await asyncio.to_thread(task.communicate, None, 150)
        assert task.returncode == 0, out + b.log()
        # The ground truth: EXECUTER on b was answered once, yes.
        answers = [e for e in b.events("EXECUTER") if e["event"] == "approval"]
        assert [e["approved"] for e in answers] == [True]
    finally:
        if task is not None and task.poll() is None:
            task.kill()
        await asyncio.to_thread(tear_down, nodes)


def test_status_on_any_node_lists_every_nodes_agents_and_a_killed_nodes_as_lost(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b", "c"])
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    try:
        b.start_node()
        assert a.poli("up").returncode == 0
        done = a.poli("task", "make hello", "--id", "T-1", "--timeout", "90")
        assert done.returncode == 0, done.stdout + done.stderr + b.log()

        def both() -> dict[str, dict[str, t.Any]] | None:
            agents = _agents(c)
            return agents if {"PLANNER", "EXECUTER"} <= agents.keys() else None

        # Node c hosts no agent and runs no router: it shows a's PLANNER and b's EXECUTER.
        agents = retry_until(both, 60, interval=0.3, what="c's status to list both agents")
        assert (agents["PLANNER"]["node"], agents["EXECUTER"]["node"]) == ("a", "b")
        assert agents["EXECUTER"]["state"] != "node lost"
        assert agents["EXECUTER"]["pane"] is None  # its pane is on b's tmux server
        text = c.poli("status").stdout
        header = next(line for line in text.splitlines() if "agent" in line and "state" in line)
        assert "node" in header, text
        # The router's machine: PLANNER from its own store (its pane), EXECUTER from b.
        on_a = _agents(a)
        assert on_a["PLANNER"]["node"] == "a" and on_a["PLANNER"]["pane"]
        assert on_a["EXECUTER"]["node"] == "b"
        last = agents["EXECUTER"]["state"]
        b.kill_node()  # kill -9: it publishes nothing more, its beat runs out

        def lost() -> dict[str, t.Any] | None:
            row = _agents(c)["EXECUTER"]
            return row if row["state"] == "node lost" else None

        row = retry_until(lost, 60, interval=0.3, what="b's EXECUTER to show as lost on c")
        assert row["stored_state"] == last
        assert _agents(c)["PLANNER"]["state"] != "node lost"  # a beats on
    finally:
        tear_down(nodes)


async def test_a_remote_question_waits_on_its_task_and_the_web_page_on_a_answers_it_on_b(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    async with _asking(tmp_path, redis_server) as a:

        def waiting() -> dict[str, t.Any] | None:
            tk = _task_of(a, "T-1")
            return tk if tk is not None and tk["state"] == "waiting_approval" else None

        # EXECUTER asks on b; the task on a's router waits on it, naming the node.
        tk = await asyncio.to_thread(retry_until, waiting, 90, interval=0.3, what="T-1 to wait")
        assert "EXECUTER (node b)" in tk["question"] and "echo hi > ran.txt" in tk["question"]
        async with browser() as br:
            with web(a.root, "--allow-actions", env=a.env) as url:
                base, token = base_and_token(url)
                page = await br.new_page(viewport={"width": 1500, "height": 1100})
                await page.goto(f"{base}/?token={token}")
                # The agents table names each agent's node; EXECUTER's row is b's.
                row = page.locator("#agents tr", has_text="EXECUTER")
                await row.wait_for(timeout=30_000)
                assert "node" in await page.locator("#agents tr").first.inner_text()
                assert await row.locator("td").nth(1).inner_text() == "b"
                approve = page.locator("#inbox button.approve")
                await approve.wait_for(state="visible", timeout=30_000)
                item = approve.locator("xpath=ancestor::li")
                assert "echo hi > ran.txt" in await item.inner_text()
                async with httpx.AsyncClient() as client:
                    got = await client.get(base + "/api/overview", headers={"X-Poli-Token": token})
                (asked,) = [i for i in got.json()["inbox"] if i["kind"] == "approval"]
                assert asked["ref"]["node"] == "b"
                await approve.click()
                await page.locator("#confirm button.yes").click()
                await page.wait_for_function(
                    "() => document.getElementById('status').textContent.includes('on node b')",
                    timeout=45_000,
                )
                # The same question again (real HTTP, the web's token): stale, refused.
                async with httpx.AsyncClient(timeout=60) as client:
                    again = await client.post(
                        base + "/api/approve",
                        headers={"X-Poli-Token": token},
                        json={**asked["ref"], "project": asked["project_key"]},
                    )
                assert again.status_code == 409, again.text
    done = _task_of(a, "T-1")
    assert done is not None and done["state"] == "done"


async def test_the_dash_on_a_lists_b_s_agent_with_its_node_and_approves_it_there(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from textual.widgets import DataTable

    from politerm.ui.dash import DashApp
    from politerm.ui.dash.modals import ConfirmScreen

    async with _asking(tmp_path, redis_server) as a:
        config = load_config(a.root, env={"POLI_FLEET_NODE": "a"})
        with a.store() as store:
            app = DashApp(config, store, project=a.root)
            async with app.run_test(size=(200, 60)) as pilot:

                def rows(name: str) -> list[list[str]]:
                    dt = app.query_one(f"#{name}", DataTable)
                    return [[str(c) for c in dt.get_row_at(i)] for i in range(dt.row_count)]

                async def asked() -> bool:
                    await pilot.pause()
                    return bool(rows("inbox"))

                await aretry_until(asked, 90, what="b's question in a's dash inbox")
                agents = app.query_one("#agents", DataTable)
                labels = [str(c.label) for c in agents.columns.values()]
                assert labels[:3] == ["agent", "node", "state"], labels
                shown = {r[0]: r for r in rows("agents")}
                assert shown["EXECUTER"][1:3] == ["b", "waiting_approval"], shown
                assert shown["PLANNER"][1] == "a"
                [item] = rows("inbox")
                assert item[2] == "EXECUTER" and "echo hi > ran.txt" in item[3]
                await pilot.press("a")

                async def confirming() -> bool:
                    await pilot.pause()
                    return isinstance(app.screen, ConfirmScreen)

                await aretry_until(confirming, 10, what="the dash to ask before approving")
                await pilot.press("y")

                async def said() -> bool:
                    await pilot.pause()
                    return any("on node b" in m for m in app.messages_shown)

                await aretry_until(said, 60, what=f"b's word in the dash {app.messages_shown}")
