"""``poli web``'s buttons in a real browser: deny, answer, gate, abort; read-only; offline."""

from __future__ import annotations

import typing as t

from politerm.agents.approval import Decision, PendingApproval, get_pending, set_pending
from politerm.config import load_config
from politerm.pipeline.state import RunRecord, RunState, read_question
from politerm.store import RunStore
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from tests.ui.uihelpers import base_and_token, browser, web

if t.TYPE_CHECKING:
    import pathlib

    from playwright.async_api import Page


def _waiting_project(root: pathlib.Path) -> pathlib.Path:
    """A project whose store holds one of each open question, and a task to abort."""
    root.mkdir()
    (root / "poli.toml").write_text(
        '[tmux]\nsocket = "poli-web-none"\n\n[store]\npath = "runs.sqlite3"\n\n'
        "[notify]\ndesktop = false\n"
    )
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        store.create_task("T-q", "pick a colour", max_rounds=3)
        store.update_task("T-q", state=TaskState.WAITING_USER, question="Which colour?")
        store.create_task("T-x", "long job", max_rounds=3)
        set_pending(store, PendingApproval("EXECUTER", "Bash", "rm -rf build", ("ok?",), 5.0))
        record = RunRecord(
            run_id="r1", pipeline="feature", pipeline_name="feature", project=str(root),
            task="build it", session="poli-proj-r1", socket="poli-web-none", cli="fake",
        )  # fmt: skip
        record.step(1)
        run = RunState(store, record)
        run.save()
        run.ask(1, "gate", "Step 1 is done. Continue to step 2?")
    return config.store.resolved_path()


def _same_origin(page: Page, base: str) -> list[str]:
    """Every URL the page requests that is not on the monitor itself (should stay empty)."""
    away: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(base) else away.append(r.url))
    return away


async def _status(page: Page, start: str) -> None:
    await page.wait_for_function(
        "(s) => document.getElementById('status').textContent.startsWith(s)",
        arg=start,
        timeout=10_000,
    )


async def test_read_only_buttons_are_disabled_and_xterm_comes_from_the_monitor(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "proj"
    path = _waiting_project(root)
    async with browser() as b:
        with web(root) as url:
            base, token = base_and_token(url)
            page = await b.new_page()
            away = _same_origin(page, base)
            await page.goto(f"{base}/?token={token}")
            deny = page.locator("#inbox button.deny")
            await deny.wait_for(state="visible", timeout=30_000)
            assert await page.locator("#mode").inner_text() == "read-only"
            for button in ("#inbox button", "#tasks button", "#pipelines button"):
                assert await page.locator(button).count() > 0, button
                for one in await page.locator(button).all():
                    assert await one.is_disabled(), button
            # the agent page's xterm.js is served by the monitor itself (works offline)
            await page.goto(f"{base}/agent/EXECUTER")
            await page.wait_for_function("() => window.poliTerm !== undefined", timeout=15_000)
            assert away == [], f"the page reached beyond the monitor: {away}"
    with RunStore.open(path) as store:
        pending = get_pending(store, "EXECUTER")
        assert pending is not None and pending.answer is None


async def test_deny_answer_gate_and_abort_from_the_page(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "proj"
    path = _waiting_project(root)
    async with browser() as b:
        with web(root, "--allow-actions") as url:
            base, token = base_and_token(url)
            page = await b.new_page(viewport={"width": 1500, "height": 1100})
            away = _same_origin(page, base)
            await page.goto(f"{base}/?token={token}")
            with RunStore.open(path) as store:
                deny = page.locator("#inbox button.deny")
                await deny.wait_for(state="visible", timeout=30_000)
                assert "Bash(rm -rf build)" in await deny.locator("xpath=ancestor::li").inner_text()
                await deny.click()
                await page.locator("#confirm button.yes").click()  # asked first
                await _status(page, "denied: EXECUTER Bash(rm -rf build)")
                pending = get_pending(store, "EXECUTER")
                assert pending is not None and pending.answer is Decision.DENY

                await page.locator("#tasks input.answer").fill("blue")
                await page.locator("#tasks button.answer").click()
                await _status(page, "answered task T-q")
                task = store.get_task("T-q")
                assert task is not None and task.state is TaskState.PLANNING
                [msg] = [m for m in store.list_messages(task_id="T-q") if m.type == "answer"]
                assert msg.body == "blue"

                await page.locator("#pipelines button.gate-y").click()
                await _status(page, "step 1: answered y")
                assert (read_question(store, "r1") or {}).get("answer") == "y"

                row = page.locator("#tasks tr", has_text="T-x")
                abort = row.locator("button", has_text="abort")
                await abort.click()
                await _status(page, "aborted task T-x")
                task = store.get_task("T-x")
                assert task is not None and task.state is TaskState.ABORTED

                # each action went through the store: the event stream page lists them
                await page.goto(f"{base}/events")  # the cookie carries the token now
                events = page.locator("#events li")

                async def listed() -> str:
                    text = await page.locator("#events").inner_text()
                    return text if "web: deny Bash(rm -rf build)" in text else ""

                await events.first.wait_for(state="visible", timeout=30_000)
                text = await aretry_until(listed, 30, what="the deny in the event stream")
                assert "answer" in text and "aborted" in text
            assert away == [], f"the page reached beyond the monitor: {away}"
