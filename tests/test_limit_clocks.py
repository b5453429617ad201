"""Clocks that stand still while an agent waits for a usage limit to reset.

A LIMITED agent's open limit is kept in the run store (:mod:`politerm.store.limits`): the
router's queued messages to it and the mail to it do not expire meanwhile, and each such
clock is moved on by the limit's length when it ends; ``poli status`` shows when it resets.
The end-to-end tests run the postman and ``poli status`` against the bundled fake agent in
real tmux panes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import time
import typing as t

from politerm.agents.state import AgentState
from politerm.store import RunStore
from politerm.store.limits import begin_limit, end_limit, open_limits, stored_limit
from politerm.store.mail import Capability, Mailbox, MailKind, MailState
from politerm.testing.retry import aretry_until
from tests.messaging.mailroom import WAIT, marked, open_mailroom

if t.TYPE_CHECKING:
    import libtmux

    from politerm.store.models import Event

# --- the store: what a limit stops, and how its end moves the clocks on ----------------------


def _mail(box: Mailbox, mail_id: str, to: str, ttl: float) -> None:
    box.add(
        id=mail_id, kind=MailKind.REQUEST, session="s", sender="ORCH", sender_pane="%0",
        recipient=to, recipient_pane="%1", capability=Capability.WRITABLE,
        body_path=f"/m/{mail_id}", size=1, sha256="0", ttl=ttl, max_attempts=3,
    )  # fmt: skip


def test_a_limit_stops_the_expiry_of_messages_and_mail_to_its_agent(
    tmp_path: pathlib.Path,
) -> None:
    clock = [1000.0]
    with RunStore.open(tmp_path / "runs.sqlite3", clock=lambda: clock[0]) as store:
        box = Mailbox(store)
        for to in ("A", "B"):
            store.add_message(
                task_id=None, sender="USER", recipient=to, type="task", msg_id=f"m-{to}",
                body="x", header={}, dedupe_key=f"m-{to}", ttl=10.0,
            )  # fmt: skip
            _mail(box, f"mail-{to}", to, 10.0)
        # A hits a limit at 1004; a message queued for it during the limit, at 1020.
        begin_limit(store, "A", since=1004.0, until=1100.0, shown=True)
        clock[0] = 1020.0
        _mail(box, "mail-late", "A", 10.0)
        # Long past every deadline: only B's expire, A's clocks stand still.
        assert [m.recipient for m in store.expire_messages(1050.0)] == ["B"]
        assert [m.id for m in box.due_to_expire(1050.0)] == ["mail-B"]
        assert box.next_expiry() == 1010.0  # B's, not A's
        # A restarted driver keeps the limit's start (the clocks stopped then).
        again = begin_limit(store, "A", since=1030.0, until=1200.0, shown=False)
        assert (again.since, again.until) == (1004.0, 1200.0)
        assert open_limits(store) == {"A": again}
        assert end_limit(store, "A", 1060.0) == 56.0
        assert stored_limit(store, "A") is None
        # Each clock moved on by the time it stood still: 6 s were left at 1004, and the
        # late mail had all of its 10 s left when the limit ended.
        msg = next(m for m in store.list_messages(recipient="A"))
        assert msg.deadline == 1066.0
        assert box.require("mail-A").expires == 1066.0
        assert box.require("mail-late").expires == 1070.0
        assert store.expire_messages(1065.0) == []
        assert [m.id for m in box.due_to_expire(1065.0)] == ["mail-B"]
        assert [m.id for m in box.due_to_expire(1066.0)] == ["mail-B", "mail-A"]
        assert end_limit(store, "A", 1070.0) == 0.0  # none open: nothing moves


# --- the postman: mail to a LIMITED receiver waits for the reset ----------------------------

LIMITED_WORKER = """
think_time = 0.3
[[rules]]
match = 'TAKE A BREAK'
reply = 'Claude usage limit reached. Please try again in {secs} seconds.'
[[rules]]
match = '^continue$'
reply = 'picked up again after the limit'
[[rules]]
match = 'SECOND'
reply = 'second one done'
"""


async def test_mail_to_a_limited_receiver_does_not_expire_until_the_limit_ends(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    routing = "message_ttl = 600.0\n\n[limits]\nmargin = 0\n"
    room = await open_mailroom(tmp_path, server.socket_name, routing=routing)
    try:
        await room.start_agent("ORCH")
        await room.start_agent("W1", scenario=LIMITED_WORKER.format(secs=20))
        room.start_postman()
        m, store = room.messenger, room.messenger.store
        first = m.send("TAKE A BREAK", to="W1", sender=room.me("ORCH"), ttl=8)
        await room.state(first.id, MailState.DELIVERED)

        def event(kind: str) -> t.Callable[[], t.Awaitable[Event | None]]:
            async def first() -> Event | None:
                return next((e for e in store.list_events() if e.kind == kind), None)

            return first

        limited = await aretry_until(event("limited"), WAIT, what="W1 read LIMITED")
        assert stored_limit(store, "W1") is not None
        # Queued while the receiver waits out a 20 s limit, with 6 s to live.
        second = m.send("SECOND", to="W1", sender=room.me("ORCH"), ttl=6)
        resumed = await aretry_until(
            event("limit-resumed"), 90, what="the postman's driver to resume W1 at the reset"
        )
        assert resumed.ts - limited.ts >= 15, (limited, resumed)
        assert stored_limit(store, "W1") is None
        done = await room.state(second.id, MailState.DELIVERED, MailState.RESPONDED, seconds=90)
        assert done.reason is None or "time to live" not in done.reason
        # The first message outlived its 8 s: it is still waiting for its answer, or it
        # expired only after the limit ended (its clock moved on by the limit's length).
        old = m.mailbox.require(first.id)
        assert old.expires >= first.expires + (resumed.ts - limited.ts) - 1, (first, old)
        assert old.state is MailState.DELIVERED or old.updated >= resumed.ts, old
        prompts = room.prompts("W1")
        assert len(marked(prompts, first.id)) == 1 and len(marked(prompts, second.id)) == 1
        assert prompts.index(b"continue") < prompts.index(marked(prompts, second.id)[0])
    finally:
        await room.close()
        await room.server.close()


# --- poli status: when a LIMITED agent's limit resets ---------------------------------------


def _poli(root: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "PATH": f"{pathlib.Path(sys.executable).parent}:"
           f"{os.environ['PATH']}"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=root, capture_output=True, text=True, timeout=90, env=env, check=False,
    )  # fmt: skip


def _limited_pane(socket: str, root: pathlib.Path, line: str) -> str:
    """Session "ours" of the project: one pane (agent A1) that shows ``line``."""
    tmux = ["tmux", "-L", socket]
    pane = subprocess.run(
        [*tmux, "new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "ours",
         f"echo '{line}'; sleep 600"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([*tmux, "set-option", "-p", "-t", pane, "@poli_agent", "A1"], check=True)
    return pane


async def test_status_shows_when_a_limited_agent_resets(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    socket = str(server.socket_name)
    (tmp_path / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "ours"\n\n[store]\npath = "r.sqlite3"\n'
    )
    pane = _limited_pane(
        socket, tmp_path, "Claude usage limit reached. Please try again in 2 hours."
    )
    with RunStore.open(tmp_path / "r.sqlite3") as store:
        store.upsert_agent(
            "A1", session="ours", pane_id=pane, command="claude", cwd=str(tmp_path),
            profile="claude", resume_command=None,
        )  # fmt: skip
        store.set_agent_state("A1", AgentState.LIMITED.value)

        async def screen_read() -> dict[str, t.Any] | None:
            res = _poli(tmp_path, "status", "--json")
            assert res.returncode == 0, res.stderr
            agent = json.loads(res.stdout)["agents"][0]
            return agent if agent["state"] == "limited" else None

        # No driver keeps a limit for it: the reset time is read off its screen.
        agent = await aretry_until(screen_read, 60, what="A1 shown limited by poli status")
        assert agent["limit"]["shown"] is True
        assert abs(agent["limit"]["resets_at"] - (time.time() + 7200)) < 120, agent
        # Its driver's limit (the policy's wait: the screen named no time) wins.
        until = time.time() + 600
        begin_limit(store, "A1", since=time.time(), until=until, shown=False)
        data = json.loads(_poli(tmp_path, "status", "--json").stdout)
        assert data["agents"][0]["limit"]["resets_at"] == until
        assert data["agents"][0]["limit"]["shown"] is False
        table = _poli(tmp_path, "status").stdout
        clock = dt.datetime.fromtimestamp(until).strftime("%H:%M:%S")
        assert f"limited · resets {clock} (in " in table, table


# --- a pipeline step: its timeout stands still while the agent is LIMITED -------------------


def test_pipeline_step_waits_out_a_limit_longer_than_its_timeout(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    from politerm.testing.fakeagent.eventlog import decode_text
    from tests.test_pipeline_run import events, finish, make_project, output, start, state

    # A 15 s step whose agent meets a limit that resets in 40 s.
    root = make_project(
        tmp_path, server, "1 | developer | - | auto | - | 0.25 | Build it FAKE:limit=40\n"
    )
    with (root / "poli.toml").open("a") as cfg:
        cfg.write("\n[limits]\nmargin = 0\n")
    proc = start(root)
    assert finish(proc, root, seconds=180) == 0, output(root)
    assert state(root)["step_1"] == "done", (state(root), output(root))
    prompts = [decode_text(e["text"]) for e in events(root, 1) if e["event"] == "prompt"]
    assert len(prompts) == 2 and prompts[1] == b"continue", prompts
    with RunStore.open(root / "runs.sqlite3") as store:
        kinds = [e.kind for e in store.list_events()]
    assert "limited" in kinds and "limit-resumed" in kinds, kinds


# --- an epic session: its timeout stands still while the agent is LIMITED -------------------


async def test_epic_session_waits_out_a_limit_longer_than_its_timeout(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.store.epics import EpicStore, SessionStatus
    from politerm.testing.fakeagent import prompts
    from tests.epic_helpers import Project, add_items

    # The fake agent in plain mode, reading the fake's limit message as LIMITED.
    agents = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    agents.mkdir(parents=True)
    (agents / "fake-plain-limits.toml").write_text(
        "extends = \"fake-plain\"\n[detectors]\nlimited = ['usage limit reached']\n"
        "limit_reset = ['try again in (?P<reset>\\d+ seconds)']\n"
    )
    project = Project(tmp_path / "repo")
    text = (project.root / "poli.toml").read_text()
    text = text.replace('agent = "fake-plain"', 'agent = "fake-plain-limits"')
    text = text.replace("fake-plain = [", "fake-plain-limits = [")
    # A 12 s session whose agent meets a limit that resets in 20 s.
    text = text.replace("session_timeout = 30", "session_timeout = 12")
    (project.root / "poli.toml").write_text(text + "[limits]\nmargin = 0\n")
    add_items(project, ("E-1", "Work while LIMITED", ()))
    async with asyncio.timeout(120):
        await project.go(summary=False)
    with project.store() as store:
        [record] = [r for r in EpicStore(store).list_records() if r.kind == "session"]
        kinds = [e.kind for e in store.list_events()]
    assert record.status == SessionStatus.SUCCESS.value, (record.status, record.error)
    assert "limited" in kinds and "limit-resumed" in kinds, kinds
    said = prompts(project.log)
    assert len(said) == 2 and said[1] == b"continue", said
