"""A real Claude Code calls politerm's MCP tools, scripted by the loopback model server.

``[agents.ORCH] mcp = true`` makes ``poli up`` register ``poli mcp`` in Claude Code's own
session config; the mock model then asks Claude to call ``mcp__poli__report_status`` and
``mcp__poli__send_message``. The message reaches a fake worker through the postman the tool
started, and the worker's ``poli reply`` answers it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import typing as t

import pytest

from politerm.agents.state import AgentState
from politerm.config import load_config
from politerm.driver import AgentDriver
from politerm.driver.launch import prepare_launch
from politerm.engine import service
from politerm.engine.session import Session
from politerm.hooks.channel import hooks_dir_for
from politerm.messaging.service import Identity, Messenger
from politerm.store import RunStore
from politerm.store.mail import MailState
from politerm.testing.fakeagent import prompts
from politerm.testing.mockllm import MockLLM, Rule
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import hide_tmux
from tests.realcli.clis import prepare
from tests.realcli.conftest import installed  # noqa: F401  # the session fixture
from tests.realcli.helpers import READY, REPLY

if t.TYPE_CHECKING:
    import libtmux

    from tests.realcli.install import Installed

pytestmark = pytest.mark.realcli


@pytest.fixture
def llm() -> t.Iterator[MockLLM]:
    server = MockLLM().start()
    yield server
    server.stop()


async def tool_turn(orch: AgentDriver, llm: MockLLM, prompt: str, rule: str) -> None:
    """Prompt Claude until its scripted tool call got a real result.

    Claude Code starts MCP servers in the background; a prompt that arrives before ``poli
    mcp`` has connected gets "still connecting" as the tool's result, and is sent again.
    """
    # Bounded: up to 30 attempts a second apart (poli mcp imports the SDK for ~2 s, and Claude
    # Code may take longer to list its tools on a busy machine).
    for attempt in range(30):
        if attempt:
            await asyncio.sleep(1.0)
        seen = len(llm.requests())
        assert (await orch.deliver(prompt)).ok

        async def result(seen: int = seen) -> str | None:
            for r in llm.requests()[seen:]:
                if r.tool_result and r.rule == rule:
                    return json.dumps(r.body["messages"][-1])
            return None

        text = await aretry_until(result, REPLY, what=f"the result of Claude's {rule} call")
        assert (await orch.wait_ready(REPLY)).state is AgentState.READY
        # still starting, or listed before its tools were: ask again
        if "still connecting" not in text and "No such tool available" not in text:
            assert '"is_error": true' not in text, text
            return
    pytest.fail(f"poli mcp never connected to Claude Code for {rule}")


async def test_claude_calls_the_poli_mcp_tools(
    server: libtmux.Server,
    tmp_path: pathlib.Path,
    llm: MockLLM,
    installed: Installed,  # noqa: F811
) -> None:
    assert server.socket_name is not None
    llm.add(
        Rule(
            r"REPORT-STATUS",
            "Reporting.",
            tool="mcp__poli__report_status",
            arguments={"status": "claude is fine"},
            after="Reported.",
            name="status",
        ),
        Rule(
            r"ASK-W1",
            "Asking W1.",
            tool="mcp__poli__send_message",
            arguments={"to": "W1", "text": "hello W1, from claude", "capability": "readonly"},
            after="Sent.",
            name="send",
        ),
    )
    spec = prepare("claude", installed.bins["claude"], llm, tmp_path / "home", tmp_path / "work")
    fake = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude"]
    worker_log = tmp_path / "w1.jsonl"
    toml = (
        f'[tmux]\nsocket = "{server.socket_name}"\nsession = "t"\n'
        f'[store]\npath = "{tmp_path / "runs.sqlite3"}"\n'
        f'[agents.ORCH]\ncommand = {json.dumps(spec.argv)}\nprofile = "claude"\n'
        f"cwd = {json.dumps(str(spec.workdir))}\nprimer = false\nmcp = true\n"
        "[agents.ORCH.env]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.env.items())
        + f"[agents.W1]\ncommand = {json.dumps([*fake, '--log', str(worker_log)])}\n"
        f'profile = "fake-claude"\ncwd = {json.dumps(str(tmp_path))}\nprimer = false\n'
    )
    cfg_path = tmp_path / "poli.toml"
    cfg_path.write_text(toml)
    config = load_config(tmp_path, env={})
    config = config.model_copy(
        update={"agents": {n: a for n, a in config.agents.items() if n in ("ORCH", "W1")}}
    )
    store = RunStore.open(config.store.resolved_path())
    session = Session(config, store)
    messenger = Messenger(config, store)
    try:
        orch = (await session.up(primers=False))["ORCH"]
        panes = await session.host.agent_panes()
        assert (await orch.wait_ready(READY)).state is AgentState.READY
        # the registration lives in the session's private hooks directory
        mcp_file = hooks_dir_for(config) / "mcp-ORCH.claude.json"
        registered = json.loads(mcp_file.read_text())["mcpServers"]["poli"]
        assert registered["env"]["POLI_AGENT"] == "ORCH"

        await tool_turn(orch, llm, "Please REPORT-STATUS now", "status")

        async def status() -> bool:
            events = store.list_events(limit=50)
            return any(e.kind == "status" and e.detail == "claude is fine" for e in events)

        await aretry_until(status, REPLY, what="claude's report_status tool call")

        await tool_turn(orch, llm, "Please ASK-W1 now", "send")

        async def delivered() -> str | None:
            found = messenger.mailbox.select(states=[MailState.DELIVERED], recipient="W1")
            return found[0].id if found else None

        msg_id = await aretry_until(delivered, REPLY, what="claude's message delivered to W1")
        mail = messenger.mailbox.require(msg_id)
        assert (mail.sender, mail.sender_pane, mail.capability.value) == (
            "ORCH",
            panes["ORCH"].pane_id,
            "readonly",
        )
        got = [p for p in prompts(worker_log) if f"Message {msg_id} ".encode() in p]
        assert len(got) == 1
        assert b"hello W1, from claude" in got[0]
        w1_pane = panes["W1"].pane_id
        done = messenger.reply("hi claude", to=msg_id, responder=Identity("W1", w1_pane))
        assert done.state is MailState.RESPONDED
        requests = [r for r in llm.requests() if r.api == "anthropic"]
        offered = {t["name"] for r in requests for t in r.body.get("tools") or []}
        assert {"mcp__poli__send_message", "mcp__poli__report_status"} <= offered
    finally:
        service.stop(messenger.config)  # the project's service the tool started
        await session.down()
        await session.host.server.close()
        store.close()


# What each CLI's own ``mcp list`` prints for a registered server; Gemini and opencode start
# it to say so (the server answered), Codex only lists it.
LISTED = {
    "codex": r"(?m)^poli\s+\S*python\S*\s+-m politerm mcp\s.*\benabled\b",
    "gemini": r"✓ poli: \S*python\S* -m politerm mcp \(stdio\) - Connected",
    "opencode": r"✓ poli\s*(\x1b\[[0-9;]*m)*\s*connected",
}


@pytest.mark.parametrize("cli", sorted(LISTED))
def test_the_registration_is_read_by_the_cli_itself(
    cli: str,
    tmp_path: pathlib.Path,
    llm: MockLLM,
    installed: Installed,  # noqa: F811
) -> None:
    """``mcp = true`` for Codex, Gemini CLI and opencode: their own ``mcp list`` sees ``poli``."""
    spec = prepare(cli, installed.bins[cli], llm, tmp_path / "home", tmp_path / "work")
    cfg_path = tmp_path / "poli.toml"
    cfg_path.write_text(
        f'[tmux]\nsocket = "mcplist"\nsession = "t"\n'
        f'[store]\npath = "{tmp_path / "state" / "runs.sqlite3"}"\n'
    )
    config = load_config(config_path=cfg_path, env={})
    argv, env = prepare_launch(
        config, "ORCH", cli, spec.argv, spec.env, mcp=True, config_file=cfg_path
    )
    # prepare_launch appends Codex's -c overrides after the CLI's own arguments
    overrides = argv[len(hide_tmux(spec.argv)) :]
    res = subprocess.run(
        [str(installed.bins[cli]), "mcp", "list", *overrides],
        cwd=spec.workdir,
        env={**os.environ, **env, "NO_COLOR": "1"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace")
    assert res.returncode == 0, out
    assert re.search(LISTED[cli], out), out
