"""What a failed turn says about the agent: its last reply lines, and a block left open.

Gemini CLI (and opencode) keep an input box and a footer at the bottom of the screen, so
"last on its screen" must skip that chrome (``render.chrome`` in the profile). A block
whose closing tag never comes must be named as rejected, not vanish.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import typing as t

import pytest

from politerm.agents import load_profile
from politerm.agents.chrome import chrome_top, is_chrome, reply_tail
from politerm.driver import AgentDriver, Expect, Host, TurnOutcome
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
READY = 60.0
TURN = 120.0


class TailCase(t.NamedTuple):
    test_id: str
    profile: str
    file: str
    last: str  # the last line the agent wrote


TAIL_CASES = [
    TailCase("gemini-plan", "gemini", "gemini-01-plan.txt", "End of plan."),
    TailCase("gemini-numbered", "gemini", "gemini-numbered-01-wrap.txt", "End of plan."),
    TailCase("gemini-busy", "gemini", "gemini-03-busy.txt", "[[/POLI:MSG]]"),
    TailCase("gemini-long", "gemini", "gemini-04-long.txt", "[[/POLI:MSG]]"),
    TailCase("opencode-plan", "opencode", "opencode-01-plan.txt", "▣  Build · Mock Model · 2.0s"),
    TailCase("opencode-long", "opencode", "opencode-04-long.txt", "▣  Build · Mock Model · 695ms"),
]


@pytest.mark.parametrize("case", TAIL_CASES, ids=[c.test_id for c in TAIL_CASES])
def test_reply_tail_skips_the_input_box_and_footer(case: TailCase) -> None:
    profile = load_profile(case.profile)
    lines = (SCREENS / case.file).read_text("utf-8").splitlines()
    # The real screen ends in chrome, which is what the old message showed.
    assert is_chrome(profile, [ln for ln in lines if ln.strip()][-1])
    tail = reply_tail(profile, lines, 4)
    assert len(tail) == 4
    assert tail[-1] == case.last
    assert not any(is_chrome(profile, ln) for ln in tail)


@pytest.mark.parametrize("case", TAIL_CASES, ids=[c.test_id for c in TAIL_CASES])
def test_chrome_top_is_just_below_the_last_reply_line(case: TailCase) -> None:
    profile = load_profile(case.profile)
    lines = (SCREENS / case.file).read_text("utf-8").splitlines()
    top = chrome_top(profile, lines)
    assert lines[top - 1].strip() == case.last
    assert all(not ln.strip() or is_chrome(profile, ln) for ln in lines[top:])


def test_chrome_top_leaves_other_profiles_at_the_bottom() -> None:
    # No chrome patterns: only the input line and blanks count, as before.
    lines = (SCREENS / "claude-01-plan.txt").read_text("utf-8").splitlines()
    assert chrome_top(load_profile("claude"), lines) >= len(lines) - 3


def test_reply_tail_without_chrome_is_the_screen_tail() -> None:
    lines = ["one", "", "two", "three"]
    assert reply_tail(load_profile("generic"), lines, 2) == ["two", "three"]


def _fake_gemini(tmp_path: pathlib.Path, body: str) -> list[str]:
    scenario = tmp_path / "fa.toml"
    scenario.write_text(body, "utf-8")
    return [
        sys.executable,
        "-m",
        "politerm.testing.fakeagent",
        "--mode",
        "gemini",
        "--scenario",
        str(scenario),
        "--log",
        str(tmp_path / "fa"),
    ]


async def _start(
    tmux_server: TmuxServer,
    client: ControlClient,
    tmp_path: pathlib.Path,
    body: str,
    store: RunStore | None = None,
) -> AgentDriver:
    return await AgentDriver.start(
        "AGENT",
        load_profile("fake-gemini"),
        argv=_fake_gemini(tmp_path, body),
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        store=store,
    )


async def test_timeout_shows_the_last_reply_lines_not_the_input_box(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    body = "default_reply = '''\nI looked at it.\nStill weighing LASTWORDS-MARK.\n'''\n"
    driver = await _start(tmux_server, tmux_session, tmp_path, body)
    async with asyncio.timeout(TURN):
        result = await driver.run_turn(
            "Make a plan.", Expect.block("plan"), timeout=5, idle_after=600, nudge=None
        )
    await driver.kill()
    assert result.outcome is TurnOutcome.TIMEOUT, result
    assert f"AGENT sent no plan block with nonce {result.nonce} within 5s" in result.error
    last = result.error.split("last on its screen: ", 1)[1]
    assert last.endswith("Still weighing LASTWORDS-MARK."), result.error
    for chrome in ("Type your message", "workspace (/directory)", "no sandbox", "▀▀▀"):
        assert chrome not in last, result.error


async def test_block_left_open_is_rejected_with_a_reason(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    # The header carries the turn's nonce; the closing tag is mangled beyond recognition.
    scenario = (
        "[[rules]]\n"
        "match = '(?s)nonce=(?P<nonce>[0-9a-f]+)'\n"
        "reply = '''\nHere is the plan.\n\n"
        '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"{nonce}"}]]\n'
        "<PLAN>\n1. do the thing\n</PLAN>\n[[/POLI:MSG-- a closing tag no parser can read\n\n"
        "End of plan.\n'''\n"
    )
    driver = await _start(tmux_server, tmux_session, tmp_path, scenario, store)
    try:
        async with asyncio.timeout(TURN):
            result = await driver.run_turn(
                lambda nonce: f"Make a plan. nonce={nonce}",
                Expect.block("plan"),
                timeout=90,
                idle_after=2,
                nudge=None,
            )
    finally:
        await driver.kill()
    assert result.outcome is TurnOutcome.IDLE, result
    assert "went idle with a block open: no closing [[/POLI:MSG]] was recognised" in result.error
    events = [e.detail for e in store.list_events() if e.kind == "rejected"]
    assert len(events) == 1 and "went idle with a block open" in events[0], events
    store.close()
