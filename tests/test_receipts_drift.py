"""Hook receipts against the screen on the fake agent: agreement, and drift both ways.

The fake agent has no hooks of its own; :class:`Mirror` plays them. It watches the fake
agent's input log (what it really submitted and answered) and runs politerm's real hook
command for each event, as Claude Code would: ``UserPromptSubmit`` when a prompt was
submitted, ``Stop`` when a reply finished. Leaving one of them out, or writing a receipt the
screen contradicts, is how drift is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import typing as t

import watchfiles

from politerm.agents import load_profile
from politerm.driver import AgentDriver, Expect, Host, Outcome, TurnOutcome
from politerm.driver.receipts import Receipts
from politerm.hooks.channel import create_channel
from politerm.hooks.install import emit_argv
from politerm.store import RunStore
from politerm.testing.fakeagent import read_log
from politerm.testing.fakeagent.eventlog import decode_text
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import Pane
from tests.test_driver import DONE_RULE, READY, TURN, prompt, scenario

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer

GRACE = 3.0  # how long the driver lets one source lag the other in these tests


async def emit(channel: pathlib.Path, event: str, payload: dict[str, t.Any]) -> None:
    """Run politerm's hook command as Claude Code does (payload on stdin)."""
    proc = await asyncio.create_subprocess_exec(
        *emit_argv(channel, "claude", event),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), 60)


class Mirror:
    """Claude-like hooks for the fake agent, from its log (``prompts``/``stops`` to omit)."""

    def __init__(self, log: pathlib.Path, channel: pathlib.Path, *, prompts: bool = True,
                 stops: bool = True) -> None:  # fmt: skip
        self.log, self.channel = log, channel
        self.prompts, self.stops = prompts, stops
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> t.Self:
        await emit(self.channel, "SessionStart", {"session_id": "fake"})
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 30)

    async def _run(self) -> None:
        seen = 0
        async for _ in watchfiles.awatch(self.log.parent, stop_event=self._stop, step=20):
            events = read_log(self.log) if self.log.exists() else []
            for e in events[seen:]:
                if e.get("event") == "prompt" and self.prompts:
                    text = decode_text(e["text"]).decode("utf-8", "replace")
                    await emit(self.channel, "UserPromptSubmit", {"prompt": text})
                elif e.get("event") == "reply" and self.stops:
                    await emit(self.channel, "Stop", {"session_id": "fake"})
            seen = len(events)


async def start(
    tmux_server: TmuxServer,
    client: ControlClient,
    tmp_path: pathlib.Path,
    body: str,
    store: RunStore | None = None,
) -> tuple[AgentDriver, pathlib.Path]:
    channel = create_channel(tmp_path / "hooks", "AGENT")
    driver = await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=scenario(tmp_path, body),
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        receipts=Receipts.open("claude", channel, from_start=True),
        store=store,
    )
    driver.hook_grace = GRACE
    return driver, channel


def drift_events(store: RunStore) -> list[str]:
    return [e.detail for e in store.list_events() if e.kind == "drift"]


async def test_hook_and_screen_agree(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    driver, channel = await start(tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""))
    async with Mirror(tmp_path / "fa", channel):
        result = await driver.run_turn(prompt("T1"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.delivery is not None and result.delivery.sources == ("hook", "screen")
    assert result.delivery.evidence[0].startswith("claude hook UserPromptSubmit accepted")
    assert result.ended_by == "hook+screen" and result.drift == ()
    await driver.kill()


async def test_screen_says_submitted_but_no_prompt_receipt_is_drift(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    driver, channel = await start(
        tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""), store
    )
    async with Mirror(tmp_path / "fa", channel, prompts=False):
        result = await driver.run_turn(prompt("T2"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.delivery is not None and result.delivery.sources == ("screen",)
    (drift,) = result.drift
    assert drift.startswith(f"delivery: hook says no prompt receipt within {GRACE:g}s; screen")
    assert result.ended_by == "hook+screen"  # its stop event still came
    assert drift_events(store) == [drift]
    await driver.kill()
    store.close()


async def test_hook_says_submitted_but_screen_disagrees_is_drift(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # The fake agent never submits (every Enter is ignored); its "hook" says it did.
    store = RunStore.open(tmp_path / "runs.sqlite3")
    body = "swallow_all_enters = true\n" + DONE_RULE.format(extra="")
    driver, channel = await start(tmux_server, tmux_session, tmp_path, body, store)
    text = "DO T3 nonce=abc123"

    async def hook_once_pasted() -> None:
        async def pasted() -> bool:
            snap = await Pane(tmux_session, driver.terminal_name, tmux_server).snapshot()
            return text in (driver.profile.input_text(snap) or "")

        await aretry_until(pasted, TURN, interval=0.05, what="the paste in the input box")
        await emit(channel, "UserPromptSubmit", {"prompt": text})

    hook = asyncio.create_task(hook_once_pasted())
    result = await driver.deliver(text)
    await hook
    assert result.outcome is Outcome.DELIVERED, result
    assert result.sources == ("hook",) and result.rule == "prompt receipt"
    (drift,) = driver.drifts
    assert drift.what == "delivery" and drift.hook.startswith("claude hook UserPromptSubmit")
    assert drift.screen.startswith(f"not submitted after {GRACE:g}s")
    assert drift_events(store) == [str(drift)]
    await driver.kill()
    store.close()


async def test_screen_says_turn_over_but_no_stop_event_is_drift(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    driver, channel = await start(tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""))
    async with Mirror(tmp_path / "fa", channel, stops=False):
        result = await driver.run_turn(prompt("T4"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.delivery is not None and result.delivery.sources == ("hook", "screen")
    assert result.ended_by == "screen"
    want = f"turn-end: hook says no stop event within {GRACE:g}s; screen says ready"
    assert result.drift == (want,)
    await driver.kill()


async def test_transcript_confirms_a_delivery_without_a_prompt_hook(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # Hooks that report no prompt event (as Codex's notify): the transcript is the agent's word.
    transcript = tmp_path / ".fake-transcript.jsonl"
    channel = create_channel(tmp_path / "hooks", "AGENT")
    driver = await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=[*scenario(tmp_path, DONE_RULE.format(extra="")), "--transcript", str(transcript)],
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        receipts=Receipts.open("codex", channel, from_start=True),
    )
    driver.hook_grace = GRACE
    result = await driver.run_turn(prompt("T5"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.delivery is not None
    # Which of the two saw it first depends on timing; both must have.
    assert set(result.delivery.sources) == {"screen", "transcript"}, result.delivery
    assert f"claude transcript {transcript.name} holds the prompt" in result.delivery.evidence
    # No stop receipt ever comes (nothing plays Codex's notify here): drift after the grace.
    assert result.ended_by == "screen"
    assert result.drift == (
        f"turn-end: hook says no stop event within {GRACE:g}s; screen says ready",
    )
    await driver.kill()
