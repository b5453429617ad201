"""The overview and the actions behind both views, on a real store and a real tmux server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import typing as t

import pytest

from politerm.agents.approval import Decision, PendingApproval, get_pending, set_pending
from politerm.config import load_config
from politerm.errors import StaleAction, UiError
from politerm.manager.store import ManagerStore
from politerm.pipeline.state import session_name
from politerm.store import RunStore
from politerm.store.mail import Capability, Mailbox, MailKind
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from politerm.ui import actions
from politerm.ui.live import LiveState

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Iterator

    import libtmux


def _project(root: pathlib.Path, socket: str) -> pathlib.Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n\n[store]\npath = "r.sqlite3"\n')
    return root


def _session(socket: str, name: str, agent: str, project: str | None) -> None:
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", name, "sleep 600"], check=True)
    subprocess.run([*tmux, "set-option", "-p", "-t", name, "@poli_agent", agent], check=True)
    if project is not None:
        subprocess.run([*tmux, "set-option", "-t", name, "@poli_project", project], check=True)


async def test_sessions_of_other_projects_are_not_shown_and_store_changes_arrive(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    _session(server.socket_name, "ours", "A1", str(root.resolve()))
    _session(server.socket_name, "theirs", "B1", "/somewhere/else")
    run = session_name(root, "20260101T120000Z-ab12")  # what a pipeline run names its session
    _session(server.socket_name, run, "step-1", None)
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        live = LiveState(config, store, project=root)
        async with live:
            names = {s["name"]: s for s in live.overview["sessions"]}
            assert set(names) == {"ours", run}
            assert names[run]["kind"] == "pipeline"
            assert {a["name"] for a in live.overview["agents"]} == {"A1", "step-1"}
            # another process answers into the store: the overview follows, unasked
            with RunStore.open(store.path) as other:
                ManagerStore(other).add_project("webapp", root, goal="ship it", agent="dev")
                Mailbox(other).add(
                    id="m-1", kind=MailKind.REQUEST, session="ours", sender="A1",
                    sender_pane="%0", recipient="W1", recipient_pane="%9",
                    capability=Capability.READONLY, body_path="m-1.txt", size=3,
                    sha256="0" * 64, ttl=600, max_attempts=3,
                )  # fmt: skip
                set_pending(other, PendingApproval("R1.step-2", "Bash", "ls", ("ok?",), 7.0))
                other.add_event("stuck", agent="A1", detail="A1 is stuck: token=hunter2secret")

            async def shown() -> bool:
                return bool(live.overview["approvals"])

            await aretry_until(shown, 60, what="the approval of a pipeline step in the overview")
            [approval] = live.overview["approvals"]
            assert approval["agent"] == "R1.step-2" and approval["what"] == "Bash(ls)"
            [manager] = live.overview["managers"]
            assert (manager["name"], manager["goal"], manager["agent"]) == (
                "webapp",
                "ship it",
                "dev",
            )
            [mail] = live.overview["mail"]
            assert (mail["id"], mail["from"], mail["to"]) == ("m-1", "A1", "W1")
            [event] = [e for e in live.overview["events"] if e["kind"] == "stuck"]
            assert "hunter2secret" not in event["detail"]
            # a pane that goes away disappears on tmux's notification, not on a timer
            kill = ["tmux", "-L", server.socket_name, "kill-session", "-t", run]
            await asyncio.to_thread(subprocess.run, kill, check=True)

            async def gone() -> bool:
                return {s["name"] for s in live.overview["sessions"]} == {"ours"}

            await aretry_until(gone, 60, what="the killed session to leave the overview")


@contextlib.contextmanager
def _one_session(server: libtmux.Server, tmp_path: pathlib.Path) -> Iterator[LiveState]:
    """A live view (not started) of a project whose agent A1 runs in tmux session "ours"."""
    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    _session(server.socket_name, "ours", "A1", str(root.resolve()))
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        yield LiveState(config, store, project=root)


async def test_store_changes_reuse_the_pane_list_until_tmux_announces_a_change(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # Every store change used to list every pane of the server again (issue 25: tmux work
    # per change that grows with the number of agents).
    assert server.socket_name is not None
    root = tmp_path / "proj"
    with _one_session(server, tmp_path) as live:
        store = live.store
        live.panes_max_age = 3600.0  # only tmux's announcements read the list again
        async with live:
            assert live.pane_listings == 1
            with RunStore.open(store.path) as other:
                for i in range(3):
                    before = live.refreshes
                    other.add_event("note", agent="A1", detail=f"change {i}")

                    async def refreshed(before: int = before) -> bool:
                        return live.refreshes > before

                    await aretry_until(refreshed, 60, what=f"the overview after change {i}")
            assert live.pane_listings == 1
            # A new session is announced on the connection that follows "ours".
            _session(server.socket_name, "ours2", "A2", str(root.resolve()))

            async def shown() -> bool:
                return "A2" in {a["name"] for a in live.overview["agents"]}

            await aretry_until(shown, 60, what="the announced new pane in the overview")
            assert live.pane_listings >= 2


async def test_a_burst_of_store_changes_is_one_refresh_after_the_pause(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # A handoff commits several times within milliseconds, and each commit rebuilt the
    # overview of every agent (issue 25: web CPU per task growing with the agents). A
    # change seen during the pause after a refresh waits for it: counted, not timed.
    with _one_session(server, tmp_path) as live:
        store = live.store
        live.min_refresh = 3600.0  # the pause after a refresh outlasts the test
        live.panes_max_age = 3600.0  # a refresh then awaits nothing: it runs at once
        with RunStore.open(store.path) as other:
            await live.start()
            try:
                first = live.refreshes
                other.add_event("note", agent="A1", detail="change 0")

                async def refreshed() -> bool:
                    return live.refreshes > first

                await aretry_until(refreshed, 60, what="the overview after the first change")
                for i in range(1, 4):
                    other.add_event("note", agent="A1", detail=f"change {i}")

                async def seen() -> bool:
                    return live._dirty.is_set()

                await aretry_until(seen, 60, what="the store watch to see the next changes")
                for _ in range(5):
                    await asyncio.sleep(0)  # a refresh loop not pausing would run now
                assert live.refreshes == first + 1
                details = [e["detail"] for e in live.overview["events"]]
                assert "change 0" in details and "change 1" not in details
            finally:
                await live.close()


async def test_a_pane_tmux_does_not_announce_shows_after_the_store_change(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # No session yet: no control connection follows the server, so nothing announces the
    # first session. The store change that comes with it reads the list once it is old
    # enough, even when no other change follows.
    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        live = LiveState(config, store, project=root)
        live.panes_max_age = 0.5
        async with live:
            assert live.overview["agents"] == []
            with RunStore.open(store.path) as other:
                other.add_event("note", agent="A1", detail="starting A1")
            _session(server.socket_name, "ours", "A1", str(root.resolve()))
            with RunStore.open(store.path) as other:
                other.add_event("note", agent="A1", detail="A1 started")

            async def shown() -> bool:
                return "A1" in {a["name"] for a in live.overview["agents"]}

            await aretry_until(shown, 60, what="the unannounced pane in the overview")


def test_actions_refuse_stale_questions(tmp_path: pathlib.Path) -> None:
    config = load_config(_project(tmp_path / "p", "poli-none"), env={})
    with RunStore.open(config.store.resolved_path()) as store:
        with pytest.raises(StaleAction, match="has no approval question open"):
            actions.approve(store, actions.ApprovalRef("EXECUTER", 1.0, "ls"), by="test")
        set_pending(store, PendingApproval("EXECUTER", "Bash", "rm x", ("?",), 2.0))
        with pytest.raises(StaleAction, match="not the one shown"):
            actions.approve(store, actions.ApprovalRef("EXECUTER", 1.0, "ls"), by="test")
        ref = actions.ApprovalRef("EXECUTER", 2.0, "rm x")
        assert actions.approve(store, ref, deny=True, by="test") == "denied: EXECUTER Bash(rm x)"
        pending = get_pending(store, "EXECUTER")
        assert pending is not None and pending.answer is Decision.DENY
        with pytest.raises(StaleAction, match="already answered"):
            actions.approve(store, ref, by="test")

        store.create_task("T1", "x", max_rounds=2)
        with pytest.raises(StaleAction, match="not waiting for an answer"):
            actions.answer(store, config, "T1", "", "blue")
        store.update_task("T1", state=TaskState.WAITING_USER, question="Which?")
        with pytest.raises(StaleAction, match="not the question shown"):
            actions.answer(store, config, "T1", "Where?", "blue")
        with pytest.raises(UiError, match="empty"):
            actions.answer(store, config, "T1", "Which?", "  ")
        with pytest.raises(UiError, match="a gate answer is one of"):
            actions.gate(tmp_path / "p", "r1", 1, "maybe", by="test")
        with pytest.raises(StaleAction, match="not waiting at a gate"):
            actions.gate(tmp_path / "p", "r1", 1, "y", by="test")


async def test_answers_and_aborts_are_logged_with_who_gave_them(tmp_path: pathlib.Path) -> None:
    config = load_config(_project(tmp_path / "p", "poli-none"), env={})
    with RunStore.open(config.store.resolved_path()) as store:
        store.create_task("T1", "x", max_rounds=2)
        store.update_task("T1", state=TaskState.WAITING_USER, question="Which?")
        actions.answer(store, config, "T1", "Which?", "blue", by="web:phone")
        store.create_task("T2", "y", max_rounds=2)
        await actions.abort(store, config, "T2", by="dash")
        logged = [e for e in store.list_events() if e.kind == "ui-action"]
        assert [(e.task_id, e.data["by"], e.data["action"]) for e in logged] == [
            ("T1", "web:phone", "answer"),
            ("T2", "dash", "abort"),
        ]
        assert logged[0].detail == "web:phone: answered 'Which?'"


async def test_sessions_of_every_workflow_are_told_apart(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    from politerm.epic.go import TMUX_SESSION
    from politerm.manager.pane import session_name as manager_session
    from politerm.pipeline.state import new_run_id
    from politerm.store.epics import EpicStore
    from tests.ui.uihelpers import poli

    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    config = load_config(root, env={})
    loop = config.tmux.session
    assert loop.startswith("poli-proj-")  # the loop's own name looks like a run's: poli-a-b
    # Each workflow's tmux session, named by the workflow's own naming function.
    named = {
        loop: "loop",
        manager_session(config, "webapp"): "manager",
        session_name(root, new_run_id()): "pipeline",
        TMUX_SESSION: "epic",
    }
    for i, name in enumerate(named):
        _session(server.socket_name, name, f"A{i}", str(root.resolve()))
    with RunStore.open(config.store.resolved_path()) as store:
        epics = EpicStore(store)
        epics.ensure_epic("e1")
        epics.create_run("go-1", epic="e1", repo_root=str(root), source="bd", agent="claude",
                         config_hash="x")  # fmt: skip
        async with LiveState(config, store, project=root) as live:

            def kinds() -> dict[str, str]:
                return {s["name"]: s["kind"] for s in live.overview["sessions"]}

            assert {n: kinds().get(n) for n in named} == named
            assert kinds()["epic run go-1"] == "epic"
            # a bridge serving the project's queue, in another process
            bridge = poli(root, "bridge", "start")
            try:

                async def serving() -> list[dict[str, t.Any]]:
                    return [s for s in live.overview["sessions"] if s["kind"] == "bridge"]

                [row] = await aretry_until(serving, 60, what="the bridge among the sessions")
                assert row["where"] == f"pid {bridge.pid}"
                assert row["name"] == str(root / ".poli" / "bridge" / "task_queue.json")
            finally:
                bridge.terminate()
                _, err = await asyncio.to_thread(bridge.communicate, None, 30)
            assert bridge.returncode == 0, err

            async def stopped() -> bool:
                return not [s for s in live.overview["sessions"] if s["kind"] == "bridge"]

            await aretry_until(stopped, 60, what="the stopped bridge to leave the sessions")


def _fill(store: RunStore, agents: int) -> None:
    """``agents`` agents, each with counted tokens; every third waits on a question."""
    with store.batch():
        for i in range(agents):
            name = f"A{i:03d}"
            store.upsert_agent(
                name, session="s", pane_id=f"%{i}", command="x", cwd=".", profile="fake-plain",
                resume_command=None,
            )  # fmt: skip
            store.set_meta(f"tokens:agent:{name}", f"{i} 1 0")
            if i % 3 == 0:
                asked = PendingApproval(name, "Bash", f"ls {i}", evidence=(), asked=1.0)
                set_pending(store, asked)


def test_the_overview_reads_the_store_in_the_same_statements_for_any_number_of_agents(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.ui.overview import collect_overview

    statements: dict[int, int] = {}
    for agents in (6, 60):
        with RunStore.open(tmp_path / f"{agents}.sqlite3") as store:
            _fill(store, agents)
            sql: list[str] = []
            store._conn.set_trace_callback(sql.append)  # counting, not changing
            data = collect_overview(store)
            store._conn.set_trace_callback(None)
            statements[agents] = len(sql)
            tokens = {a["name"]: a["tokens"] for a in data["agents"]}
            assert tokens == {f"A{i:03d}": i + 1 for i in range(agents)}
            asked = [p["agent"] for p in data["approvals"]]
            assert asked == [f"A{i:03d}" for i in range(0, agents, 3)]
            assert data["approvals"][1]["command"] == "ls 3"
    # Each agent used to cost two reads (its tokens, its question): 60 agents, 108 more.
    assert statements[60] == statements[6], statements


def test_a_refresh_redacts_what_changed_not_every_agent(tmp_path: pathlib.Path) -> None:
    # A live view refreshes its overview on every store change: redacting all of it again
    # was most of a refresh at 500 agents (issue 25). Only strings not seen before are.
    from politerm.ui.overview import Cleaner, collect_overview

    redacted: dict[int, list[int]] = {}
    for agents in (6, 60):
        with RunStore.open(tmp_path / f"{agents}.sqlite3") as store:
            _fill(store, agents)
            store.add_event("note", detail="password=hunter2 leaked")
            cleaner = Cleaner()
            counts = []
            collect_overview(store, cleaner=cleaner)
            for change in ("nothing", "one agent"):
                if change == "one agent":
                    store.set_agent_state("A001", "busy")
                before = cleaner.redactions
                data = collect_overview(store, cleaner=cleaner)
                counts.append(cleaner.redactions - before)
                # The same as a view that never cleaned anything before: nothing lost.
                assert data == collect_overview(store)
            assert {a["name"]: a["state"] for a in data["agents"]}["A001"] == "busy"
            assert "hunter2" not in json.dumps(data)
            redacted[agents] = counts
    assert redacted[60] == redacted[6], redacted
    assert redacted[6][0] == 0, redacted
