"""``poli dash`` driven with Textual's Pilot against real sessions of fake agents."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import subprocess
import sys
import time
import typing as t

from textual.widgets import DataTable, Static

from politerm.agents.approval import Decision, PendingApproval, get_pending, set_pending
from politerm.config import load_config
from politerm.driver.tokens import stored_tokens
from politerm.pipeline.state import RunRecord, RunState, read_question
from politerm.store import RunStore
from politerm.store.limits import begin_limit
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until, retry_until
from politerm.ui.dash import DashApp, attach_argv
from politerm.ui.dash.modals import AskScreen, ConfirmScreen, GateScreen
from tests.loophelpers import started
from tests.ui.uihelpers import ask_project, poli, screenshot_path

if t.TYPE_CHECKING:
    import libtmux
    from textual.pilot import Pilot


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


def _rows(app: DashApp, table: str) -> list[list[str]]:
    dt = app.query_one(f"#{table}", DataTable)
    return [[str(c) for c in dt.get_row_at(i)] for i in range(dt.row_count)]


async def _until(pilot: Pilot[None], check: t.Callable[[], bool], what: str) -> None:
    async def ok() -> bool:
        await pilot.pause()
        return check()

    await aretry_until(ok, 60, what=what)


async def test_dash_lists_the_session_mirrors_live_and_filters(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root) as loop:
        with RunStore.open(loop.store.path) as store:
            app = DashApp(loop.config, store, project=root, agent="PLANNER")
            async with app.run_test(size=(200, 60)) as pilot:
                await _until(
                    pilot,
                    lambda: {r[0] for r in _rows(app, "agents")} == {"PLANNER", "EXECUTER"},
                    "both agents listed",
                )
                sessions = _rows(app, "sessions")
                assert sessions[0][:2] == ["t", "loop"]
                await _until(
                    pilot,
                    lambda: app.screen_mirror is not None and any(app.screen_mirror.lines()),
                    "the mirror's first screen",
                )
                pane = (await loop.session.host.agent_panes())["PLANNER"]
                marker = "dash-mirror-4412"
                await pane.paste(marker.encode())
                await _until(
                    pilot,
                    lambda: marker in "\n".join(app.screen_mirror.lines()),  # type: ignore[union-attr]
                    "the pasted text in the mirror",
                )
                # the mirror came from %output bytes, not from re-capturing the pane
                assert app.live.refreshes < 10
                app.save_screenshot(str(screenshot_path(tmp_path, "dash.svg")))
                await pilot.press("slash")
                await _until(pilot, lambda: app.focused is not None and app.focused.id == "filter",
                             "the filter box focused")  # fmt: skip
                await pilot.press(*"exec")
                await _until(
                    pilot,
                    lambda: [r[0] for r in _rows(app, "agents")] == ["EXECUTER"],
                    f"filter {app.filter_text!r} {_rows(app, 'agents')}",
                )
                await pilot.press("escape")
                await _until(pilot, lambda: len(_rows(app, "agents")) == 2, "filter cleared")
                # the highlighted agent is the one attached to
                entry = app.live.pane(app.selected_agent or "")
                assert entry is not None
                await pilot.press("t")
                shown = app.messages_shown[-1]
                assert shown == "attach: " + " ".join(attach_argv(_socket(server), entry.pane_id))


async def test_dash_approves_the_exact_question_the_agent_goes_on_and_its_tokens_show(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server), transcripts=True)  # the agents' tokens count
    async with started(root) as loop:
        with RunStore.open(loop.store.path) as store:
            app = DashApp(loop.config, store, project=root)
            async with app.run_test(size=(200, 60)) as pilot:
                router = poli(root, "task", "make hello", "--id", "T-dash", "--timeout", "90")
                try:
                    await _until(pilot, lambda: bool(_rows(app, "inbox")), "an approval row")
                    [row] = _rows(app, "inbox")
                    assert row[:3] == ["approval", "proj", "EXECUTER"]
                    assert "echo hi > out.txt" in row[3]
                    app.save_screenshot(str(screenshot_path(tmp_path, "dash-approval.svg")))
                    await pilot.press("a")
                    await _until(
                        pilot,
                        lambda: isinstance(app.screen, ConfirmScreen),
                        f"confirm {app.messages_shown}",
                    )
                    dialog = app.screen
                    assert isinstance(dialog, ConfirmScreen)
                    assert "echo hi > out.txt" in dialog.question
                    await pilot.press("y")
                    await asyncio.to_thread(
                        retry_until,
                        lambda: (root / "executer" / "out.txt").is_file(),
                        60,
                        what="out.txt written after approving from the dashboard",
                    )
                    out, err = await asyncio.to_thread(router.communicate, None, 90)
                    assert router.returncode == 0, (out, err)
                finally:
                    if router.poll() is None:
                        router.kill()
                assert app.messages_shown[-1].startswith("approved: EXECUTER")
                await _until(
                    pilot,
                    lambda: any(r[0] == "T-dash" and r[1] == "done" for r in _rows(app, "tasks")),
                    "the task shown done",
                )
                counted = stored_tokens(store, "agent:PLANNER").total
                assert counted > 0
                await _until(
                    pilot,
                    lambda: (
                        ["PLANNER", str(counted)] in [[r[0], r[5]] for r in _rows(app, "agents")]
                    ),
                    f"the planner's {counted} tokens in the agents table",
                )


async def test_dash_fills_every_table_answers_a_question_a_gate_and_aborts_a_task(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(
        '[tmux]\nsocket = "poli-dash-none"\n\n[store]\npath = "runs.sqlite3"\n'
    )
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as writer:
        writer.create_task("T-q", "pick a colour", max_rounds=3)
        writer.update_task("T-q", state=TaskState.WAITING_USER, question="Which colour?")
        writer.create_task("T-x", "long job", max_rounds=3)
        record = RunRecord(
            run_id="r1", pipeline="feature", pipeline_name="feature", project=str(root),
            task="build it", session="poli-proj-r1", socket="poli-dash-none", cli="fake",
        )  # fmt: skip
        record.step(1)
        run = RunState(writer, record)
        run.save()
        run.ask(1, "gate", "Step 1 is done. Continue to step 2?")
        _fill_the_other_tables(writer, root)
        asks = ("Bash command", "rm -rf build", "Do you want to proceed?")
        set_pending(writer, PendingApproval("EXECUTER", "Bash", "rm -rf build", asks, 5.0))
    with RunStore.open(config.store.resolved_path()) as store:
        app = DashApp(config, store, project=root)
        async with app.run_test(size=(200, 60)) as pilot:
            await _until(pilot, lambda: len(_rows(app, "tasks")) == 2, "two tasks")
            [agent] = _rows(app, "agents")
            assert (agent[0], agent[5]) == ("PLANNER", "1234"), agent
            assert [r[:3] for r in _rows(app, "work")] == [
                ["epic run", "go-1", "e1"], ["item", "e1-1", "e1"]
            ]  # fmt: skip
            assert [r[:3] for r in _rows(app, "mail")] == [["m-1", "request", "A1 → W1"]]
            assert [r[:3] for r in _rows(app, "manager")] == [["webapp", "idle", "dev"]]
            assert _rows(app, "pipelines") == [
                ["r1", "1", "?", "pending", "?", "Step 1 is done. Continue to step 2?"]
            ]
            # deny: the dialog shows the exact command and the question on the agent's screen
            await _until(pilot, lambda: bool(_rows(app, "inbox")), "the approval row")
            await pilot.press("d")
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "deny dialog")
            assert isinstance(app.screen, ConfirmScreen)
            assert app.screen.title_text == "deny this?"
            assert app.screen.question == (
                "EXECUTER (proj) wants to run: Bash(rm -rf build)\n\n" + "\n".join(asks)
            )
            await pilot.press("y")
            await _until(
                pilot,
                lambda: (
                    (p := get_pending(store, "EXECUTER")) is not None and p.answer is Decision.DENY
                ),
                "the question denied",
            )
            assert app.messages_shown[-1] == "denied: EXECUTER Bash(rm -rf build)"
            # the event log at the bottom says who answered what
            await _until(
                pilot,
                lambda: (
                    "ui-action" in str(app.query_one("#events", Static).content)
                    and "dash: deny Bash(rm -rf build)"
                    in str(app.query_one("#events", Static).content)
                ),
                "the deny in the event log",
            )

            await pilot.press("n")
            await _until(pilot, lambda: isinstance(app.screen, AskScreen), "the answer dialog")
            assert isinstance(app.screen, AskScreen) and app.screen.question == "Which colour?"
            await pilot.press(*"blue", "enter")
            await _until(pilot, lambda: not isinstance(app.screen, AskScreen), "dialog closed")
            task = store.get_task("T-q")
            assert task is not None and task.state is TaskState.PLANNING
            [msg] = [m for m in store.list_messages(task_id="T-q") if m.type == "answer"]
            assert msg.body == "blue" and msg.recipient == "PLANNER"
            # the answer waits for the planner: a message not yet delivered
            await _until(
                pilot,
                lambda: [r[1:4] for r in _rows(app, "messages")] == [["T-q", "USER → PLANNER",
                                                                      "answer"]],
                f"the answer among the messages {_rows(app, 'messages')}",
            )  # fmt: skip

            await _until(pilot, lambda: bool(_rows(app, "pipelines")), "the pipeline run")
            await pilot.press("g")
            await _until(pilot, lambda: isinstance(app.screen, GateScreen), "the gate dialog")
            assert isinstance(app.screen, GateScreen)
            assert app.screen.question == "Step 1 is done. Continue to step 2?"
            await pilot.press("y")
            await _until(
                pilot, lambda: (read_question(store, "r1") or {}).get("answer") == "y", "gate"
            )

            app.query_one("#tasks", DataTable).focus()
            await pilot.press("down")
            await _until(pilot, lambda: app.selected_task == "T-x", "T-x selected")
            await pilot.press("x")
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "abort dialog")
            await pilot.press("y")
            await _until(
                pilot,
                lambda: (tk := store.get_task("T-x")) is not None and tk.state is TaskState.ABORTED,
                "T-x aborted",
            )
            # a second answer to the same question is stale
            await pilot.press("n")
            assert app.messages_shown[-1] == "no task is waiting for an answer"


def _fill_the_other_tables(store: RunStore, root: pathlib.Path) -> None:
    """An agent with tokens, an epic run and its item, mail between agents, a manager project."""
    from politerm.driver.tokens import add_tokens
    from politerm.manager.store import ManagerStore
    from politerm.protocol.usage import Usage
    from politerm.store.epics import EpicStore
    from politerm.store.mail import Capability, Mailbox, MailKind

    store.upsert_agent(
        "PLANNER", session="t", pane_id="%99", command="fake", cwd=str(root),
        profile="fake-claude", resume_command=None,
    )  # fmt: skip
    add_tokens(store, ["agent:PLANNER", "run"], Usage(1000, 234))
    epics = EpicStore(store)
    epics.ensure_epic("e1")
    epics.add_item("e1", "first item", item_id="e1-1")
    epics.create_run("go-1", epic="e1", repo_root=str(root), source="bd", agent="claude",
                     config_hash="x")  # fmt: skip
    Mailbox(store).add(
        id="m-1", kind=MailKind.REQUEST, session="t", sender="A1", sender_pane="%0",
        recipient="W1", recipient_pane="%9", capability=Capability.READONLY,
        body_path="m-1.txt", size=3, sha256="0" * 64, ttl=600, max_attempts=3,
    )  # fmt: skip
    ManagerStore(store).add_project("webapp", root, goal="ship it", agent="dev")


def test_dash_mirror_snapshot(
    server: libtmux.Server, tmp_path: pathlib.Path, snap_compare: t.Any
) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    socket = _socket(server)
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n\n[store]\npath = "r.sqlite3"\n')
    # a fake claude in "/" (so the screen holds no temporary path), tagged as agent SNAP
    argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude"]
    subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-s", "snap", "-x", "80", "-y", "16",
         "-c", "/", " ".join(argv)],
        check=True,
    )  # fmt: skip
    subprocess.run(
        ["tmux", "-L", socket, "set-option", "-p", "-t", "snap", "@poli_agent", "SNAP"],
        check=True,
    )
    retry_until(
        lambda: "? for shortcuts"
        in subprocess.run(
            ["tmux", "-L", socket, "capture-pane", "-p", "-t", "snap"],
            capture_output=True, text=True, check=True,
        ).stdout,
        30,
        what="the fake agent's first screen",
    )  # fmt: skip
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        app = DashApp(config, store, project=root, agent="SNAP")

        async def ready(pilot: Pilot[None]) -> None:
            await _until(
                pilot,
                lambda: (
                    app.screen_mirror is not None
                    and "? for shortcuts" in "\n".join(app.screen_mirror.lines())
                ),
                "the mirrored screen",
            )
            await pilot.press("z")
            await pilot.pause()

        assert snap_compare(app, terminal_size=(100, 24), run_before=ready)


async def test_dash_shows_when_a_limited_agent_resets(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    ask_project(root, _socket(server))
    async with started(root) as loop:
        now = time.time()
        begin_limit(loop.store, "PLANNER", since=now, until=now + 7200, shown=True)
        loop.store.set_agent_state("PLANNER", "limited")
        with RunStore.open(loop.store.path) as store:
            app = DashApp(loop.config, store, project=root)
            async with app.run_test(size=(200, 60)) as pilot:

                def planner_state() -> str:
                    return next((r[1] for r in _rows(app, "agents") if r[0] == "PLANNER"), "")

                await _until(
                    pilot,
                    lambda: planner_state().startswith("limited · resets "),
                    "the PLANNER's reset time in the agents table",
                )
                at = datetime.datetime.fromtimestamp(now + 7200).strftime("%H:%M:%S")
                assert at in planner_state(), planner_state()


async def test_a_refresh_redraws_only_the_rows_that_changed_and_shard_panes_are_rows_of_their_own(
    tmp_path: pathlib.Path,
) -> None:
    # At 500 agents each store change cleared and re-added every row of every table (issue
    # 25). And a session of many agents spans several tmux servers, each with its own %0,
    # %1, ...: the agents table refused the second agent on a pane id as a duplicate row.
    drawn = {agents: await _rows_drawn_for_one_change(tmp_path, agents) for agents in (6, 60)}
    assert drawn == {6: 1, 60: 1}, drawn


async def _rows_drawn_for_one_change(tmp_path: pathlib.Path, agents: int) -> int:
    """Rows the dashboard draws when one of ``agents`` agents (3 per pane id) changes."""
    root = tmp_path / f"proj{agents}"
    root.mkdir()
    (root / "poli.toml").write_text(
        '[tmux]\nsocket = "poli-dash-none"\n\n[store]\npath = "runs.sqlite3"\n'
    )
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as writer:
        with writer.batch():
            for i in range(agents):
                writer.upsert_agent(
                    f"A{i:03d}", session="s", pane_id=f"%{i % 3}", command="x", cwd=".",
                    profile="fake-plain", resume_command=None, socket=f"shard-{i // 3}",
                )  # fmt: skip
        with RunStore.open(config.store.resolved_path()) as store:
            app = DashApp(config, store, project=root)
            async with app.run_test(size=(200, 60)) as pilot:

                def states() -> dict[str, str]:
                    return {r[0]: r[1] for r in _rows(app, "agents")}

                await _until(pilot, lambda: len(states()) == agents, "every agent listed")
                before = dict(states())
                rows = app.rows_drawn
                writer.set_agent_state("A001", "busy")
                await _until(pilot, lambda: states()["A001"] == "busy", "A001 busy")
                drawn = app.rows_drawn - rows
                assert states() == {**before, "A001": "busy"}
                # A refresh with nothing new draws nothing.
                refreshes, rows = app.live.refreshes, app.rows_drawn
                app.live.poke()
                await _until(pilot, lambda: app.live.refreshes > refreshes, "a refresh")
                assert app.rows_drawn == rows
    return drawn
