"""Real CLIs with their default display settings: blocks the renderer numbered and wrapped.

Gemini CLI draws code blocks with line numbers by default and wraps long lines itself,
leaving the continuation unnumbered. The agent driver must still read the block off the
screen, in the turn's own window.
"""

from __future__ import annotations

import json
import re
import typing as t

import pytest

from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.testing.mockllm import Rule
from tests.realcli.helpers import REPLY, AgentSpec

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]

# Long enough that a 200-column pane wraps it.
LONG = (
    "do the thing alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima "
    "mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
    "zulu one two three four five six seven"
)
NUMBERED = (
    "Here is the plan.\n\n```\n"
    '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"{nonce}"}]]\n'
    f"<PLAN>\n1. {LONG}\n2. check the thing\n</PLAN>\n[[/POLI:MSG]]\n```\n\nEnd of plan."
)


async def test_gemini_numbered_block_with_a_wrapped_line(rig: RigFactory, llm: MockLLM) -> None:
    llm.add(Rule(r"REALCLI-NUMBERED nonce=(?P<nonce>[0-9a-f]+)", NUMBERED))
    r = await rig({"AGENT": AgentSpec("gemini")})
    agent = r.agent("AGENT")
    settings = json.loads((agent.spec.home / ".gemini" / "settings.json").read_text())
    assert "ui" not in settings, "the test must run with Gemini's default display settings"
    driver = AgentDriver(
        "AGENT", agent.profile, agent.pane, cwd=agent.spec.workdir, env=agent.spec.env
    )
    start = driver.turn_start(await agent.snapshot())
    result = await driver.run_turn(
        lambda nonce: f"Please make a plan. REALCLI-NUMBERED nonce={nonce}",
        Expect.block("plan", block_id="T1"),
        timeout=REPLY * 2,
    )
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    screen = await agent.lines()
    # The CLI really numbered the block and wrapped the long line without a number.
    close = [ln for ln in screen if re.fullmatch(r" +\d+ \[\[/POLI:MSG\]\]\s*", ln)]
    assert close, "\n".join(screen)
    numbered = next(i for i, ln in enumerate(screen) if re.match(r" +\d+ 1\. do the thing", ln))
    assert not re.match(r" +\d+ ", screen[numbered + 1]), screen[numbered : numbered + 2]
    block = result.block
    assert block is not None and block.nonce == result.nonce
    assert block.body_lines == [f"1. {LONG}", "2. check the thing"]
    # Read off the screen in the turn's window too, not only from Gemini's chat log (which
    # may have answered the turn first).
    key = (result.nonce, "plan", "T1")

    async def on_screen() -> bool:
        await driver.read_blocks(await agent.snapshot(), start, result.nonce)
        return key in driver._blocks.screen_blocks

    await agent.wait(on_screen, "the numbered block read off the screen")
    assert driver._blocks.screen_blocks[key].body_lines == block.body_lines
    assert driver._blocks.rejected == []
