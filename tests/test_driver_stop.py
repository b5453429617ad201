"""A turn the operator stops (abort, soft stop with its wrap-up note and grace), an agent
that exits mid-turn (its exit status named), and a fenced report read to the end of the
output (obi's legacy footer cross-checked) — on the fake agent in real PTYs."""

from __future__ import annotations

import asyncio
import pathlib
import sys
import uuid

from politerm.agents import load_profile
from politerm.driver import AgentDriver, Expect, TurnOutcome
from politerm.driver.stop import StopControl
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
READY = 30.0
TURN = 60.0
SID = str(uuid.UUID(int=7))

REPORTS = f"""
think_time = 0.1
strip_fences = false
default_reply = "Still thinking."

[[rules]]
match = '\\AWRAP UP'
reply = '''Wrapping up.
```poli:{SID}
status: success
commit_msg: Stopped early
details: |
  Partial.
```'''

[[rules]]
match = '\\ADRIFT'
reply = '''```poli:{SID}
status: success
commit_msg: Do it
details: Did it in one go.
```
STATUS: SUCCESS
COMMIT_MSG:
Did it in two goes.
'''

[[rules]]
match = '\\ACRASH'
action = "crash"
"""


async def _start(tmp_path: pathlib.Path) -> AgentDriver:
    body = tmp_path / "fa.toml"
    body.write_text(REPORTS, "utf-8")
    argv = [*FAKE, "--scenario", str(body), "--log", str(tmp_path / "fa.jsonl")]
    return await AgentDriver.start(
        "AGENT", load_profile("fake-plain"), argv=argv, cwd=tmp_path, ready_timeout=READY
    )


async def _replied(tmp_path: pathlib.Path, count: int) -> None:
    async def replied() -> bool:
        log = tmp_path / "fa.jsonl"
        return log.exists() and sum(e["event"] == "reply" for e in read_log(log)) >= count

    await aretry_until(replied, TURN, what=f"{count} replies of the agent")


async def test_an_abort_ends_the_turn_at_once(tmp_path: pathlib.Path) -> None:
    driver = await _start(tmp_path)
    stop = StopControl()
    try:
        turn = asyncio.create_task(
            driver.run_turn("Think.", Expect.fenced_report(SID), timeout=600, stop=stop)
        )
        await _replied(tmp_path, 1)
        stop.abort()
        async with asyncio.timeout(TURN):
            result = await turn
    finally:
        await driver.kill()
    assert (result.outcome, result.error) == (TurnOutcome.ABORTED, "aborted by the operator")
    assert not result.wrapped_up
    assert prompts(tmp_path / "fa.jsonl") == [b"Think."]


async def test_a_soft_stop_delivers_the_wrap_up_note_and_takes_the_answer(
    tmp_path: pathlib.Path,
) -> None:
    driver = await _start(tmp_path)
    stop = StopControl()
    said: list[str] = []
    try:
        turn = asyncio.create_task(
            driver.run_turn(
                "Think.",
                Expect.fenced_report(SID),
                timeout=600,
                stop=stop,
                wrap_up="WRAP UP now.",
                grace=60,
                on_progress=said.append,
            )
        )
        await _replied(tmp_path, 1)
        stop.request()
        async with asyncio.timeout(TURN):
            result = await turn
    finally:
        await driver.kill()
    assert result.ok, result.error
    assert result.wrapped_up and result.report is not None
    assert result.report.commit_msg == "Stopped early"
    assert prompts(tmp_path / "fa.jsonl") == [b"Think.", b"WRAP UP now."]
    assert said == ["working", "wrapping up", "answered"]


async def test_a_soft_stop_without_the_answer_ends_after_the_grace(tmp_path: pathlib.Path) -> None:
    driver = await _start(tmp_path)
    stop = StopControl()
    try:
        turn = asyncio.create_task(
            driver.run_turn(
                "Think.",
                Expect.fenced_report(SID),
                timeout=600,
                idle_after=0.5,  # a soft stop stops the nudges
                stop=stop,
                wrap_up="Please finish.",
                grace=2,
            )
        )
        await _replied(tmp_path, 1)
        stop.request()
        async with asyncio.timeout(TURN):
            result = await turn
    finally:
        await driver.kill()
    assert result.outcome is TurnOutcome.ABORTED
    assert result.error == f"soft stop: no poli:{SID} report within the 2s grace period"
    assert result.wrapped_up and result.nudges == 0
    assert prompts(tmp_path / "fa.jsonl") == [b"Think.", b"Please finish."]


async def test_an_agent_that_exits_mid_turn_is_named_with_its_exit_status(
    tmp_path: pathlib.Path,
) -> None:
    driver = await _start(tmp_path)
    try:
        async with asyncio.timeout(TURN):
            result = await driver.run_turn("CRASH now.", Expect.fenced_report(SID), timeout=60)
    finally:
        await driver.kill()
    assert result.outcome is TurnOutcome.EXITED, result
    assert result.exit_status == 3
    assert "AGENT exited (status 3)" in result.error, result.error


async def test_a_report_is_cross_checked_with_the_legacy_footer_after_it(
    tmp_path: pathlib.Path,
) -> None:
    driver = await _start(tmp_path)
    try:
        async with asyncio.timeout(TURN):
            result = await driver.run_turn("DRIFT please.", Expect.fenced_report(SID), timeout=60)
    finally:
        await driver.kill()
    assert result.ok and result.report is not None, result.error
    assert result.report.legacy["COMMIT_MSG"] == "Did it in two goes."
    assert len(result.report.drift) == 1, result.report.drift


async def test_unless_aborted_cancels_the_wait_on_an_abort() -> None:
    stop = StopControl()
    waiting = asyncio.Event()

    async def forever() -> None:
        waiting.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(stop.unless_aborted(forever()))
    await waiting.wait()
    stop.request()
    assert not task.done()
    stop.request()
    async with asyncio.timeout(5):
        assert await task is False
    assert await stop.unless_aborted(asyncio.sleep(0)) is False
