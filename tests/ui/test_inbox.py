"""The inbox: what waits on a person in every project a view shows, on real stores and tmux."""

from __future__ import annotations

import hashlib
import subprocess
import time
import typing as t

from politerm.agents.approval import Decision, PendingApproval, get_pending, set_pending
from politerm.config import load_config
from politerm.pipeline.state import RunRecord, RunState
from politerm.store import RunStore
from politerm.store.db import MIGRATIONS, connect
from politerm.store.limits import begin_limit
from politerm.store.models import MessageState, TaskState
from politerm.ui import actions
from politerm.ui.live import LiveState
from politerm.ui.projects import home_ref, user_projects

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def _project(root: pathlib.Path, socket: str) -> pathlib.Path:
    """A project with its store where every project keeps it (``<user state>/projects``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n')
    return root.resolve()


def _pane(socket: str, session: str, agent: str, project: str | None = None) -> None:
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "sleep 600"], check=True)
    subprocess.run([*tmux, "set-option", "-p", "-t", session, "@poli_agent", agent], check=True)
    if project is not None:
        subprocess.run([*tmux, "set-option", "-t", session, "@poli_project", project], check=True)


def _gate(store: RunStore, root: pathlib.Path, run_id: str, session: str) -> None:
    record = RunRecord(
        run_id=run_id, pipeline="feature", pipeline_name="feature", project=str(root),
        task="build it", session=session, socket="s", cli="fake",
    )  # fmt: skip
    record.step(1)
    run = RunState(store, record)
    run.save()
    run.ask(1, "gate", "Step 1 is done. Continue to step 2?")


async def test_one_inbox_of_every_project_newest_first_each_answerable_in_place(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    a = _project(tmp_path / "alpha", server.socket_name)
    b = _project(tmp_path / "beta", server.socket_name)
    ca, cb = load_config(a, env={}), load_config(b, env={})
    with RunStore.for_config(cb) as sb:
        _gate(sb, b, "rb", "poli-beta-run")  # newest but one: asked now
        sb.create_task("T-dead", "x", max_rounds=2)
        sb.add_message(
            task_id="T-dead", sender="PLANNER", recipient="EXECUTER", type="plan",
            msg_id="m1", body="do it", header={}, dedupe_key="d1", state=MessageState.DEAD,
        )  # fmt: skip
    with RunStore.for_config(ca) as sa:
        set_pending(sa, PendingApproval("EXECUTER", "Bash", "rm -rf build", ("proceed?",), 10.0))
        sa.create_task("T-q", "pick", max_rounds=2)
        sa.update_task("T-q", state=TaskState.WAITING_USER, question="Which colour?")
        sa.create_task("T-b", "big", max_rounds=2)
        sa.add_event("budget", task_id="T-b", agent="PLANNER", detail="turn ended: 5000 tokens")
        sa.update_task("T-b", state=TaskState.FAILED, error="budget")
        sa.upsert_agent("CODER", session="x", pane_id="%99", command="c", cwd=str(a),
                        profile="fake", resume_command=None)  # fmt: skip
        begin_limit(sa, "CODER", since=20.0, until=time.time() + 3600, shown=True)
        sa.set_agent_state("CODER", "limited")
    # project beta's manager: shown with beta, never with alpha alone
    _pane(server.socket_name, f"{cb.tmux.session}-mgr-web", "MGR-B")

    with RunStore.for_config(ca) as store:
        others = user_projects(home_ref(ca))[1:]
        assert [o.root for o in others] == [b]
        async with LiveState(ca, store, project=a, others=others) as live:
            data = live.overview
            assert [p["name"] for p in data["projects"]] == ["alpha", "beta"]
            kinds = [(i["kind"], i["project"], i["agent"]) for i in data["inbox"]]
            assert sorted(kinds) == sorted(
                [
                    ("approval", "alpha", "EXECUTER"),
                    ("question", "alpha", ""),
                    ("budget", "alpha", "PLANNER"),
                    ("limited", "alpha", "CODER"),
                    ("gate", "beta", "step-1"),
                    ("message", "beta", "EXECUTER"),
                ]
            )
            since = [i["since"] for i in data["inbox"]]
            assert since == sorted(since, reverse=True)
            assert data["inbox"][-1]["kind"] == "approval"  # asked at t=10: the oldest
            [limited] = [i for i in data["inbox"] if i["kind"] == "limited"]
            assert limited["since"] == 20.0 and "resets" in limited["what"]
            [ask] = [i for i in data["inbox"] if i["kind"] == "approval"]
            assert ask["command"] == "rm -rf build" and ask["actions"] == ["approve", "deny"]
            managers = [(r["name"], r["project"]) for r in data["agents"] if r["name"] == "MGR-B"]
            assert managers == [("MGR-B", "beta")]
            # answered in place, in the project the item names, from where it was given
            ref = actions.ApprovalRef(**ask["ref"])
            sa, _ = live.project_of(ask["project_key"])
            actions.approve(sa, ref, by="web:pixel")
            pending = get_pending(store, "EXECUTER")
            assert pending is not None and pending.answer is Decision.APPROVE
            assert pending.by == "web:pixel"
            [gate] = [i for i in data["inbox"] if i["kind"] == "gate"]
            _, beta = live.project_of(gate["project_key"])
            assert beta.root is not None
            actions.gate(beta.root, gate["ref"]["run_id"], gate["ref"]["seq"], "y", by="dash")
        # scoped to alpha: beta's manager and beta's gate are not shown
        async with LiveState(ca, store, project=a) as live:
            data = live.overview
            assert [p["name"] for p in data["projects"]] == ["alpha"]
            assert "MGR-B" not in {r["name"] for r in data["agents"]}
            assert {i["project"] for i in data["inbox"]} == {"alpha"}


async def test_a_pipeline_steps_row_shows_its_open_approval(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    config = load_config(root, env={})
    with RunStore.for_config(config) as store:
        record = RunRecord(
            run_id="r7", pipeline="feature", pipeline_name="feature", project=str(root),
            task="build it", session="poli-proj-r7", socket=server.socket_name, cli="fake",
        )  # fmt: skip
        record.step(1)
        RunState(store, record).save()
        _pane(server.socket_name, "poli-proj-r7", "step-1")
        asks = ("Bash command", "npm test", "Do you want to proceed?")
        set_pending(store, PendingApproval("r7.step-1", "Bash", "npm test", asks, 3.0))
        async with LiveState(config, store, project=root) as live:
            [row] = [r for r in live.overview["agents"] if r["name"] == "step-1"]
            assert row["state"] == "waiting_approval"
            assert row["approval"] == {"what": "Bash(npm test)", "command": "npm test"}
            [ask] = live.overview["approvals"]
            assert ask["pane"] == row["pane"]  # the step's page finds it by its pane


async def test_a_view_reads_other_projects_stores_as_they_are_and_migrates_none(
    tmp_path: pathlib.Path,
) -> None:
    # A view lists every project of the user: it opened each store with the migrations,
    # so looking at one project upgraded (wrote) another's stale store it found.
    a, b, c = (_project(tmp_path / n, "poli-none") for n in ("alpha", "beta", "gamma"))
    ca, cb, cc = (load_config(root, env={}) for root in (a, b, c))
    with RunStore.for_config(cb) as sb:
        sb.create_task("T-b", "x", max_rounds=2)
        sb.update_task("T-b", state=TaskState.WAITING_USER, question="Which colour?")
    old = cc.store.resolved_path()  # what an older politerm left: schema version 1
    old.parent.mkdir(parents=True)
    conn = connect(old, migrations=MIGRATIONS[:1])
    conn.execute("INSERT INTO meta (key, value) VALUES ('project:root', ?)", (str(c),))
    conn.close()
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    with RunStore.for_config(ca) as store:
        others = user_projects(home_ref(ca))[1:]
        assert sorted(o.root for o in others if o.root) == sorted([b, c])
        async with LiveState(ca, store, project=a, others=others) as live:
            names = [p["name"] for p in live.overview["projects"]]
            asked = [(i["project"], i["task"]) for i in live.overview["inbox"]]
    assert names == ["alpha", "beta"]  # gamma is not shown until its own poli migrates it
    assert asked == [("beta", "T-b")]
    assert hashlib.sha256(old.read_bytes()).hexdigest() == before
    with RunStore.open(old) as gamma:  # its own project's poli migrates it
        assert gamma.schema_version == len(MIGRATIONS)
