"""``poli mcp``: every tool called over stdio by the official MCP client, as an agent would."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import stat
import sys
import threading
import typing as t

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from politerm.messaging.mcp_server import TOOL_NAMES, Tools
from politerm.messaging.service import Identity
from politerm.store.mail import MailState
from tests.messaging.helpers import add_agent, config_of, open_messenger, write_config


@contextlib.asynccontextmanager
async def mcp_session(
    cfg: pathlib.Path, agent: str, cwd: pathlib.Path
) -> t.AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "politerm", "mcp"],
        env={**os.environ, "POLI_AGENT": agent, "POLI_CONFIG": str(cfg), "POLI_POSTMAN": "off"},
        cwd=cwd,
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=60) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: t.Any) -> str:
    assert isinstance(result, CallToolResult)
    parts = [c.text for c in result.content if isinstance(c, TextContent)]
    return "\n".join(parts)


async def call(session: ClientSession, name: str, **args: t.Any) -> t.Any:
    result = await session.call_tool(name, args)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


@pytest.fixture
def cfg(tmp_path: pathlib.Path) -> pathlib.Path:
    path = write_config(tmp_path)
    m = open_messenger(config_of(path))
    add_agent(m, "ORCH", "%1")
    add_agent(m, "W1", "%2")
    m.store.set_agent_state("ORCH", "ready")  # as its driver last saw it
    m.store.close()
    return path


async def test_every_tool_over_stdio(cfg: pathlib.Path, tmp_path: pathlib.Path) -> None:
    async with mcp_session(cfg, "ORCH", tmp_path) as orch:
        tools = await orch.list_tools()
        assert sorted(tool.name for tool in tools.tools) == sorted(TOOL_NAMES)

        agents = await call(orch, "list_agents")
        # No session is up: the observer says EXITED whatever a driver stored last.
        assert [(a["name"], a["pane"], a["you"], a["state"]) for a in agents] == [
            ("ORCH", "%1", True, "exited"),
            ("W1", "%2", False, "exited"),
        ]

        sent = await call(
            orch, "send_message", to="W1", text="count the lines", capability="readonly"
        )
        assert sent["state"] == "queued"
        msg_id = sent["id"]

        m = open_messenger(config_of(cfg))
        try:
            mail = m.mailbox.require(msg_id)
            assert (mail.sender, mail.sender_pane, mail.capability.value) == (
                "ORCH",
                "%1",
                "readonly",
            )
            m.mailbox.transition(msg_id, MailState.DELIVERING)
            m.mailbox.transition(msg_id, MailState.DELIVERED, delivered=True, started=True)
        finally:
            m.store.close()

        async with mcp_session(cfg, "W1", tmp_path) as w1:
            inbox = await call(w1, "read_inbox")
            assert [i["id"] for i in inbox] == [msg_id]
            assert "count the lines" in inbox[0]["request"]
            replied = await call(w1, "reply", text="42 lines")
            assert (replied["id"], replied["state"]) == (msg_id, "responded")
            status = await call(w1, "report_status", status="counting done")
            assert status["event"] > 0
            handed = await call(w1, "handoff", note="please review", to="pipeline")
            assert pathlib.Path(handed["file"]).read_text().endswith("please review\n")
            task = await call(w1, "handoff", note="plan the release", to="planner")
            assert task["state"] == "pending"

        # a dead letter is in its sender's inbox, with the reason
        lost = await call(orch, "send_message", to="W1", text="are you there?")
        m = open_messenger(config_of(cfg))
        try:
            m.mailbox.transition(lost["id"], MailState.DEAD, reason="receiver W1 exited")
        finally:
            m.store.close()

        own = await call(orch, "read_inbox")
        answered = next(i for i in own if i["id"] == msg_id)
        assert answered["state"] == "responded"
        assert answered["response"] == "42 lines"
        dead = next(i for i in own if i["id"] == lost["id"])
        assert (dead["state"], dead["reason"]) == ("dead", "receiver W1 exited")

        bad = await orch.call_tool("send_message", {"to": "NOPE", "text": "x"})
        assert isinstance(bad, CallToolResult)
        assert bad.is_error
        assert "no such agent in session 'mail'" in text_of(bad)
        assert "Traceback" not in text_of(bad)


async def test_send_message_with_wait_returns_the_response(
    cfg: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    m = open_messenger(config_of(cfg))
    stop = threading.Event()

    def worker() -> None:
        # plays postman and worker: delivers whatever arrives for W1, then answers it
        while not stop.wait(0.05):
            queued = m.mailbox.next_queued("W1")
            if queued is None:
                continue
            m.mailbox.transition(queued.id, MailState.DELIVERING)
            m.mailbox.transition(queued.id, MailState.DELIVERED)
            m.reply("pong", to=queued.id, responder=Identity("W1", "%2"))
            return

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        async with mcp_session(cfg, "ORCH", tmp_path) as orch:
            done = await call(orch, "send_message", to="W1", text="ping", wait=True, timeout=30)
        assert (done["state"], done["response"]) == ("responded", "pong")
    finally:
        stop.set()
        thread.join()
        m.store.close()


@pytest.mark.parametrize(
    ("setting", "meta_run", "main", "step"),
    [
        ("", False, ".handoff.md", ".handoff-step-2.md"),
        ("", True, ".meta/handoff.md", ".meta/handoff-step-2.md"),
        ('handoff_dir = "notes"\n', True, "notes/handoff.md", "notes/handoff-step-2.md"),
    ],
    ids=["classic", "meta-run", "setting"],
)
def test_pipeline_handoff_goes_where_the_runs_prompts_name_it(
    tmp_path: pathlib.Path, setting: str, meta_run: bool, main: str, step: str
) -> None:
    cfg = write_config(tmp_path)
    cfg.write_text(cfg.read_text() + "[pipeline]\n" + setting)
    work = tmp_path / "work"
    work.mkdir()
    if meta_run:  # a run from a META repository wrote its task here
        (work / ".meta").mkdir()
        (work / ".meta" / "handoff.md").write_text("# task\n")
    m = open_messenger(config_of(cfg))
    try:
        tools = Tools(m, cfg, cwd=work)
        assert json.loads(tools.handoff("done", to="pipeline"))["file"] == str(work / main)
        assert json.loads(tools.handoff("part", to="pipeline", step=2))["file"] == str(work / step)
        assert (work / main).read_text().endswith("done\n")
        assert stat.S_IMODE((work / step).stat().st_mode) == 0o600
    finally:
        m.store.close()
