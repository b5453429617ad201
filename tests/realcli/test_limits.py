"""Real CLIs meeting the API's limits: a 429 / usage-limit answer, LIMITED, resumed turn.

The mock model server answers the turn's prompt with the API's own limit error (its body
and reset headers, :mod:`politerm.testing.mockllm.limits`), as many times as the CLI asks
before it gives up and shows the limit on screen. The driver reads LIMITED, waits for the
reset (the one on screen, else the policy's ``wait``), closes the CLI's limit menu where it
opens one (the profile's ``limit_dialog``), delivers "continue", and the mock's answer to that
is the block that ends the turn. The turn's tokens are read from the CLI's own transcript.
"""

from __future__ import annotations

import asyncio
import re
import typing as t

import pytest

from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Expect, LimitPolicy, TurnOutcome
from politerm.driver.tokens import stored_tokens
from politerm.testing.mockllm import Rule
from politerm.testing.retry import aretry_until
from tests.realcli.clis import API, Options
from tests.realcli.helpers import AgentSpec

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory

# Mostly waiting: on the CLI's own retries, on the reset's minute (pytest.mark.clock).
pytestmark = [pytest.mark.realcli, pytest.mark.clock, pytest.mark.timeout(400)]

NONCE = "5eed1a2b"
DONE = (
    "Resumed after the limit.\n\n"
    '[[POLI:MSG {"to":"ORCH","type":"done","id":"L1","nonce":"' + NONCE + '"}]]\n'
    "finished after the reset\n[[/POLI:MSG]]\n"
)


class Case(t.NamedTuple):
    test_id: str
    cli: str
    kind: t.Literal["rate", "usage"]
    reset_in: float  # what the API's headers and body say
    times: int  # limit answers before the API lets requests through (0: until lifted)
    on_screen: bool  # the CLI shows when the limit resets
    retries: bool = False  # the CLI retries by itself (busy) before it shows the limit
    menu: bool = False  # the CLI opens a menu under the limit (the profile's limit_dialog)
    options: Options = Options()


CASES = [
    # Claude Code gives up on a 429 at once when retry-after is long, and shows no time.
    Case("claude-429", "claude", "rate", 120, 1, False),
    Case("claude-usage", "claude", "usage", 120, 1, False),
    # Signed in as a subscriber, the plan's limit is its own screen: "You've hit your
    # session limit · resets 5:19pm (UTC)" (to the minute), and a "What do you want to do?"
    # menu under it that the profile closes before "continue".
    Case(
        "claude-subscription",
        "claude",
        "usage",
        20,
        0,
        True,
        menu=True,
        options=Options(subscription=True),
    ),
    # Codex does not retry a usage limit; it shows "try again at 2:00 PM" (to the minute).
    Case("codex-usage", "codex", "usage", 20, 1, True),
    # A daily quota is final for Gemini CLI (no retries of its own): "Usage limit reached for
    # gemini-3.8-flash." in a "Keep trying / Stop" menu, with no time.
    Case("gemini-daily-quota", "gemini", "usage", 20, 0, False, menu=True),
    # aider retries a 429 by itself for about a minute (busy), then gives up and shows
    # litellm's "Please try again in 2s": the limit is lifted once politerm reads LIMITED.
    Case("aider-429", "aider", "rate", 2, 0, True, retries=True),
    # opencode retries by itself too (busy: "[retrying in 2s attempt #1]"), then shows the
    # error at the end of its session view.
    Case("opencode-429", "opencode", "rate", 3, 0, True, retries=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
async def test_limit_resolves_into_a_resumed_turn(
    case: Case, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(
        Rule(r"LIMIT-L1", limit=case.reset_in, limit_kind=case.kind, times=case.times),
        Rule(r"(?m)^continue\s*$", DONE),
        Rule(r"LIMIT-L1", DONE),
    )
    r = await rig({"AGENT": AgentSpec(case.cli, options=case.options)})
    agent = r.agent("AGENT")
    # No time on screen: the policy's wait stands in for the reset.
    policy = LimitPolicy(resume="continue", wait=3.0, margin=0.0)
    driver = AgentDriver(
        "AGENT",
        agent.profile,
        agent.pane,
        store=r.store,
        limits=policy,
        cwd=agent.spec.workdir,
        env=agent.spec.env,
    )

    async def lift_when_limited() -> None:
        # The API's limit resets once the agent waits for it (a CLI retrying by itself
        # would otherwise never see an answer).
        async def gave_up() -> bool:
            # Limited, and (for a CLI that retries by itself) idle under the message.
            if not any(e.kind == "limited" for e in r.store.list_events()):
                return False
            if not case.retries:
                return True
            snap = await agent.snapshot()
            return agent.profile.detect(snap, limited=False).state is AgentState.READY

        await aretry_until(gave_up, 300, interval=0.5, what="the CLI to give up on the limit")
        llm.lift_limits()

    lifter = asyncio.create_task(lift_when_limited())
    try:
        async with asyncio.timeout(300):
            result = await driver.run_turn(
                "Do the task LIMIT-L1 and answer with the done block.",
                Expect.block("done", block_id="L1"),
                timeout=180,
                nonce=NONCE,
            )
    finally:
        lifter.cancel()
    seen = [f"{e.kind}: {e.detail}" for e in r.store.list_events()]
    assert result.outcome is TurnOutcome.ANSWERED, (result.error, seen)
    assert result.block is not None and "finished after the reset" in result.block.body
    events = {e.kind: e.detail for e in r.store.list_events()}
    assert "limited" in events and "limit-resumed" in events, events
    said = "the screen says" if case.on_screen else "no time shown"
    assert said in events["limited"], events["limited"]
    if case.menu:
        assert "menu closed" in events["limit-resumed"], events["limit-resumed"]
    # The turn's tokens, read from the CLI's own transcript (the mock reports usage).
    used = stored_tokens(r.store, "agent:AGENT")
    assert used.total > 0 and "tokens" in events, (used, events)
    if case.cli == "opencode":
        # From its database's step-finish parts: exactly what the mock reported for the
        # one answered request (10 prompt tokens, one per 4 characters of the answer).
        assert (used.input, used.output) == (10, len(DONE) // 4), used
    main = [m.user_text for m in llm.requests(api=API[case.cli])]
    # Claude Code sends the failed prompt again with "continue" under it; aider adds its
    # own reminders after it.
    assert any(re.search(r"(?m)^continue\s*$", text) for text in main), main
