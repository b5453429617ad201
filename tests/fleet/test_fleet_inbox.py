"""The router's tasks that wait for an answer, listed and answered on any node (issue 22).

PLANNER on node a (its router) asks the user a question; node c hosts no agent and runs no
router, so its store has no such task: ``poli status``, the dashboard's inbox and the web
page's inbox on c list it from the board, marked with node a, and answering it there goes
to a's router. Real redis-server, real ``poli`` processes per node, the fake agents; the
ground truth is PLANNER's own log on a.
"""

from __future__ import annotations

import asyncio
import json
import typing as t

import httpx
import pytest

from politerm.config import load_config
from politerm.testing.retry import aretry_until, retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.fleet.test_fleet_anywhere import ASKS, QUESTION
from tests.ui.uihelpers import base_and_token, browser, web

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow


def _waiting(node: FleetNode) -> dict[str, dict[str, t.Any]]:
    """``poli status --json`` on ``node``: the tasks waiting for an answer, by id."""
    shown = node.poli("status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    tasks = json.loads(shown.stdout)["tasks"]
    return {tk["id"]: tk for tk in tasks if tk["state"] == "waiting_user"}


def _answers(node: FleetNode) -> list[str]:
    """The answers PLANNER on ``node`` was handed, from its own log."""
    return [p for p in node.prompts("PLANNER") if p.startswith("The user answered")]


async def _ask(a: FleetNode, c: FleetNode, task_id: str) -> None:
    """Task ``task_id`` from a, until PLANNER asked and c's status lists it from node a."""
    asked = await asyncio.to_thread(
        a.poli, "task", "make hello", "--id", task_id, "--timeout", "90"
    )
    assert asked.returncode == 3, asked.stdout + asked.stderr
    listed = await asyncio.to_thread(
        retry_until,
        lambda: _waiting(c).get(task_id),
        60,
        interval=0.3,
        what=f"{task_id} in c's status",
    )
    assert (listed["node"], listed["agent"]) == ("a", "PLANNER")
    assert QUESTION in listed["question"]
    text = (await asyncio.to_thread(c.poli, "status")).stdout
    assert f"{task_id} (node a)" in text, text


async def _answered(a: FleetNode, c: FleetNode, task_id: str, count: int) -> None:
    """PLANNER on a was handed ``count`` answers; the task ended; c lists it no more."""
    await asyncio.to_thread(
        retry_until, lambda: len(_answers(a)) >= count, 90, what=f"answer {count} on a"
    )
    await asyncio.to_thread(
        retry_until, lambda: task_id not in _waiting(c), 60, what=f"{task_id} gone from c"
    )


@pytest.mark.timeout(400)  # three machines' processes, a dash and a browser, on 2 shared cores
async def test_the_routers_questions_are_listed_and_answered_in_the_dash_and_web_on_c(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from textual.widgets import DataTable, Input

    from politerm.ui.dash import DashApp
    from politerm.ui.dash.modals import AskScreen

    nodes = make_fleet(tmp_path, redis_server, ["a", "b", "c"], planner=ASKS)
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    try:
        b.start_node()
        assert (await asyncio.to_thread(a.poli, "up")).returncode == 0
        await _ask(a, c, "T-q")
        # The dashboard on c (Textual's pilot): its inbox lists a's question, node a.
        config = load_config(c.root, env={"POLI_FLEET_NODE": "c"})
        with c.store() as store:
            app = DashApp(config, store, project=c.root)
            async with app.run_test(size=(200, 60)) as pilot:

                def inbox() -> list[list[str]]:
                    dt = app.query_one("#inbox", DataTable)
                    return [[str(x) for x in dt.get_row_at(i)] for i in range(dt.row_count)]

                async def listed() -> bool:
                    await pilot.pause()
                    return bool(inbox())

                await aretry_until(listed, 60, what="a's question in c's dash inbox")
                [item] = inbox()
                assert item[0] == "question (node a)" and item[2] == "PLANNER", item
                assert QUESTION in item[3]
                # Its tasks table names the task's node and no round it cannot know.
                tasks = app.query_one("#tasks", DataTable)
                row = [str(x) for x in tasks.get_row_at(0)]
                assert row[:3] == ["T-q (node a)", "waiting_user", "-"], row
                await pilot.press("n")

                async def asking() -> bool:
                    await pilot.pause()
                    return isinstance(app.screen, AskScreen)

                await aretry_until(asking, 10, what="the dash to ask for the answer")
                app.screen.query_one("#answer", Input).value = "Use 'hello'."
                await pilot.press("enter")

                async def said() -> bool:
                    await pilot.pause()
                    return any("on node a" in m for m in app.messages_shown)

                await aretry_until(said, 60, what=f"a's word in the dash {app.messages_shown}")
                assert "answered task T-q (on node a)" in app.messages_shown
                await _answered(a, c, "T-q", 1)

                async def emptied() -> bool:
                    await pilot.pause()
                    return not inbox()

                await aretry_until(emptied, 30, what="c's dash inbox to empty")
        # The web page on c (a real browser): a second question, answered there.
        await _ask(a, c, "T-r")
        async with browser() as br:
            with web(c.root, "--allow-actions", env=c.env) as url:
                base, token = base_and_token(url)
                page = await br.new_page(viewport={"width": 1500, "height": 1100})
                await page.goto(f"{base}/?token={token}")
                asked = page.locator("#inbox li.kind-question")
                await asked.wait_for(timeout=30_000)
                shown = await asked.inner_text()
                assert QUESTION in shown and "node a" in shown and "T-r" in shown, shown
                await asked.locator("input.answer").fill("Use 'hi'.")
                await asked.locator("button.answer").click()
                await page.locator("#confirm button.yes").click()
                await page.wait_for_function(
                    "() => document.getElementById('status').textContent.includes('on node a')",
                    timeout=45_000,
                )
                await _answered(a, c, "T-r", 2)
                await asked.wait_for(state="detached", timeout=30_000)
                # The same answer again: the task asks nothing any more, refused (409).
                async with httpx.AsyncClient(timeout=60) as client:
                    again = await client.post(
                        base + "/api/answer",
                        headers={"X-Poli-Token": token},
                        json={"task": "T-r", "question": QUESTION, "text": "Use 'hi'."},
                    )
                assert again.status_code == 409, again.text
                assert "node a" in again.json()["error"], again.text
        # The ground truth: PLANNER on a was handed each answer once, in order.
        answers = _answers(a)
        assert len(answers) == 2, answers
        assert "Use 'hello'." in answers[0] and "Use 'hi'." in answers[1], answers
    finally:
        await asyncio.to_thread(tear_down, nodes)
