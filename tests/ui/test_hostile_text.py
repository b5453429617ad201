"""Agent text in the dashboard and the web page: never control sequences, markup or secrets.

Text that agents and people wrote — a task's request and question, an event, a manager's
goal, a work item, an approval's command — holds OSC 52 (clipboard write), OSC 0 (window
title), ``ESC[2J``, a C1 CSI, Textual markup, HTML and a GitHub token. The overview both
views draw from, the page a real browser renders from ``poli web`` and the dashboard driven
with Pilot must show it inert: no control character, no markup applied, no token.
"""

from __future__ import annotations

import asyncio
import json
import typing as t
import urllib.request

from politerm.agents.approval import PendingApproval, set_pending
from politerm.config import load_config
from politerm.manager.store import ManagerStore
from politerm.store import RunStore
from politerm.store.epics import EpicStore
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from politerm.ui.dash import DashApp
from tests.loophelpers import write_project
from tests.ui.uihelpers import base_and_token, browser, web

if t.TYPE_CHECKING:
    import pathlib

    import libtmux
    from textual.pilot import Pilot

    from politerm.config import Config

TOKEN = "ghp_" + "Zy9xW8vU7tS6rQ5pO4nM3lK2jI1hG0fE9dC8"
HOSTILE = (
    "clip \x1b]52;c;aGk=\x07 title \x1b]0;pwned\x07 clear \x1b[2J c1 \x9b31m "
    f"[bold red]markup[/] <b id=injected>html</b> {TOKEN}"
)


def _controls(text: str) -> list[str]:
    return sorted(
        {repr(c) for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F}
    )


def _get_json(url: str) -> t.Any:
    with urllib.request.urlopen(url, timeout=30) as resp:  # our own server
        return json.loads(resp.read().decode("utf-8"))


def _strings(value: t.Any) -> t.Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _project(server: libtmux.Server, tmp_path: pathlib.Path) -> tuple[pathlib.Path, Config]:
    """A project on the test's tmux server whose store holds the hostile texts."""
    assert server.socket_name is not None
    root = tmp_path / "proj"
    write_project(root, server.socket_name)
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        _fill(store, root)
    return root, config


def _fill(store: RunStore, root: pathlib.Path) -> None:
    store.create_task("T-hostile", f"request {HOSTILE}", max_rounds=2)
    # Within the tasks table's 50 characters: a closing tag with nothing to close.
    store.create_task("T-markup", "fix list[/] then [bold]bold[/bold]", max_rounds=2)
    store.update_task("T-hostile", state=TaskState.WAITING_USER, question=f"question {HOSTILE}")
    store.add_event("stuck", agent="PLANNER", detail=f"event {HOSTILE}")
    ManagerStore(store).add_project("web", root, goal=f"goal {HOSTILE}", agent="dev")
    EpicStore(store).add_item("E", f"item {HOSTILE}", item_id="E-1")
    set_pending(store, PendingApproval("EXECUTER", "Bash", f"echo {HOSTILE}", ("ok?",), 7.0))


def _inert(text: str, where: str) -> None:
    assert _controls(text) == [], f"{where}: {text[-600:]!r}"
    assert TOKEN not in text, where
    assert "]0;pwned" in text, f"{where} lost the text itself: {text[-600:]!r}"


async def test_the_web_page_and_its_overview_show_agent_text_inert(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root, _ = _project(server, tmp_path)
    with web(root) as url:
        base, token = base_and_token(url)
        overview = await asyncio.to_thread(_get_json, f"{base}/api/overview?token={token}")
        shown = "\n".join(_strings(overview))
        _inert(shown, "/api/overview")
        for part in ("request", "question", "event", "goal", "item", "echo"):
            assert f"{part} clip" in shown, part
        async with browser() as b:
            page = await b.new_page()
            await page.goto(f"{base}/?token={token}")
            await page.wait_for_function(
                "() => document.body.innerText.includes('question clip')", timeout=60_000
            )
            text = await page.inner_text("body")
            _inert(text, "the web page")
            assert "<b id=injected>html</b>" in text  # shown as text, not parsed as HTML
            assert await page.locator("#injected").count() == 0
            assert "pwned" not in await page.title()


async def test_the_dashboard_shows_agent_text_inert(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    from textual.widgets import DataTable, Static

    root, config = _project(server, tmp_path)
    with RunStore.open(config.store.resolved_path()) as store:
        app = DashApp(config, store, project=root)
        async with app.run_test(size=(240, 70)) as pilot:

            def cells() -> str:
                out: list[str] = []
                for table in app.query(DataTable):
                    for i in range(table.row_count):
                        out += [str(c) for c in table.get_row_at(i)]
                events = app.query_one("#events", Static)
                out.append(str(events.render()))
                return "\n".join(out)

            async def filled(p: Pilot[None] = pilot) -> bool:
                await p.pause()
                text = cells()
                return all(f"{part} clip" in text for part in ("request", "goal", "item"))

            await aretry_until(filled, 60, what="the hostile texts in the dashboard's tables")
            text = cells()
            _inert(text, "the dashboard")
            assert "[bold red]markup[/]" in text  # markup shown as typed, never applied
            screen = app.export_screenshot()
            assert TOKEN not in screen and "\x1b]" not in screen
            # What the table draws, not only what it holds: Textual reads a str cell as markup.
            assert "list[/]&#160;then&#160;[bold]bold[/bold]" in screen, "markup was applied"
