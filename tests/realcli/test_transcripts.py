"""The agents' own transcripts, written by the real Gemini CLI and opencode.

Gemini CLI appends its chat to ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` and
opencode keeps its session in a SQLite database. The driver reads them next to the
screen: a block the alternate screen has already scrolled away (opencode) is recovered
from there, and a block on both is cross-checked.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.testing.mockllm import Rule
from tests.realcli.helpers import REPLY, AgentSpec

if t.TYPE_CHECKING:
    from politerm.protocol.block import Block
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory
    from tests.realcli.helpers import Agent, Rig

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]

NONCE = "(?P<nonce>[0-9a-f]+)"
BLOCK = (
    "```\n"
    '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"{nonce}"}]]\n'
    "<PLAN>\n1. do the thing\n2. check the thing\n</PLAN>\n[[/POLI:MSG]]\n```\n"
)
# Enough lines after the block to push it off a 50-row screen.
NOTES = "".join(f"\nNote {i}: nothing else to add here." for i in range(1, 81))


def _driver(r: Rig, agent: Agent) -> AgentDriver:
    return AgentDriver(
        agent.name,
        agent.profile,
        agent.pane,
        store=r.store,
        cwd=agent.spec.workdir,
        env=agent.spec.env,
    )


def _events(r: Rig, kind: str) -> list[str]:
    return [e.detail for e in r.store.list_events() if e.kind == kind]


async def test_gemini_block_is_read_from_its_chat_log_and_cross_checked(
    rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(Rule(f"REALCLI-GEMINI-LOG nonce={NONCE}", "Here is the plan.\n\n" + BLOCK))
    r = await rig({"AGENT": AgentSpec("gemini")})
    agent = r.agent("AGENT")
    driver = _driver(r, agent)
    result = await driver.run_turn(
        lambda nonce: f"Please plan. REALCLI-GEMINI-LOG nonce={nonce}",
        Expect.block("plan", block_id="T1"),
        timeout=REPLY * 2,
    )
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    key = (result.nonce, "plan", "T1")

    async def logged() -> bool:
        await driver.read_blocks(await agent.snapshot(), -1, result.nonce)
        return key in driver._blocks.transcript_blocks

    await agent.wait(logged, "the block in Gemini CLI's chat log")
    raw = driver._blocks.transcript_blocks[key]
    assert raw.body_lines == ["1. do the thing", "2. check the thing"]
    checks = _events(r, "cross-check")
    assert checks == ["plan block: screen and transcript agree"], (checks, _events(r, "drift"))


async def test_opencode_block_scrolled_off_the_screen_is_recovered(
    rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(Rule(f"REALCLI-OPENCODE-LOG nonce={NONCE}", BLOCK + NOTES))
    r = await rig({"AGENT": AgentSpec("opencode")})
    agent = r.agent("AGENT")
    driver = _driver(r, agent)
    nonce = "5c0ffe"
    start = driver.turn_start(await agent.snapshot())
    delivery = await driver.deliver(f"Please plan. REALCLI-OPENCODE-LOG nonce={nonce}")
    assert delivery.ok, delivery

    async def finished() -> bool:
        snap = await agent.snapshot()
        text = "\n".join(snap.lines)
        return "Note 80:" in text and agent.profile.detect(snap).state is AgentState.READY

    await agent.wait(finished, "opencode to show the end of its reply")
    snap = await agent.snapshot()
    assert snap.alternate_screen
    assert not any("POLI:MSG" in ln for ln in snap.lines), "the block is still on screen"
    found: list[Block] = []

    async def recovered() -> bool:
        found.extend(await driver.read_blocks(await agent.snapshot(), start, nonce))
        return bool(found)

    await agent.wait(recovered, "the block from opencode's database")
    (block,) = found
    assert (block.type, block.id, block.nonce) == ("plan", "T1", nonce)
    assert block.body_lines == ["1. do the thing", "2. check the thing"]
    assert (nonce, "plan", "T1") not in driver._blocks.screen_blocks
    assert driver._blocks.transcript_blocks[(nonce, "plan", "T1")] == block
