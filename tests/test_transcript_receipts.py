"""Gemini CLI's and opencode's transcripts as a receipt source: the prompt, and the turn's end.

On the recorded files (``fixtures/transcripts``, see ``test_transcripts_gemini_opencode``):
the chat grown line by line as Gemini CLI wrote it, and opencode's rows. On the fake agent:
a :class:`GeminiLog` writes a Gemini-style chat from the fake agent's own log (its prompt as
a user message, its reply as a model message) while the driver runs a turn, which then ends
on the transcript with the screen agreeing, or with drift when the chat never says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import sqlite3
import typing as t

import watchfiles

from politerm.agents import load_profile
from politerm.agents.profile import TranscriptSpec
from politerm.driver import AgentDriver, Expect, Host, TurnOutcome
from politerm.driver.transcriptcheck import TranscriptCheck
from politerm.store import RunStore
from politerm.testing.fakeagent import read_log
from politerm.testing.fakeagent.eventlog import decode_text
from tests.test_driver import DONE_RULE, READY, TURN, prompt, scenario

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "transcripts"
GRACE = 3.0  # how long one source may lag the other in these tests


def _gemini_lines() -> list[str]:
    return (FIXTURES / "gemini-session.jsonl").read_text("utf-8").splitlines(keepends=True)


def _kind(line: str) -> str:
    obj = json.loads(line)
    content = obj.get("content")
    if obj.get("type") == "user" and isinstance(content, list) and "text" in content[0]:
        return "user:" + str(content[0]["text"])[:20]
    if obj.get("type") == "user":
        return "tool-result"
    if obj.get("type") == "gemini":
        return "gemini+tools" if obj.get("toolCalls") else "gemini"
    return "other"


def test_gemini_chat_confirms_the_prompt_and_says_when_its_turn_is_over(
    tmp_path: pathlib.Path,
) -> None:
    lines = _gemini_lines()
    chat = tmp_path / "chat.jsonl"
    spec = TranscriptSpec(format="gemini", locate="file", path="chat.jsonl")
    first = next(i for i, ln in enumerate(lines) if "please TOOLME now" in ln)
    chat.write_text("".join(lines[:first]))
    check = TranscriptCheck(spec, tmp_path, {}, "please TOOLME now")
    assert check.confirmed() is None and check.turn_over() is None
    seen: list[tuple[str, bool, str | None]] = []
    for line in lines[first:]:
        with chat.open("a") as fh:
            fh.write(line)
        if _kind(line) != "other":
            seen.append((_kind(line), check.confirmed() is not None, check.turn_over()))
    over = "gemini transcript: model message e6fbc229-45ec-4810-90bc-278e6b057ae4 complete"
    assert seen == [
        ("user:please TOOLME now", True, None),
        # Gemini writes the model's message with its tokens, then again with its tool
        # calls (same moment): between the two it reads as complete, and the screen (busy
        # with the tool) is what keeps the turn open.
        (
            "gemini",
            True,
            "gemini transcript: model message 2cc8824b-7aca-4bb6-b7a4-66fdb4d8dd3b complete",
        ),
        ("gemini+tools", True, None),
        ("tool-result", True, None),
        ("gemini", True, over),
    ]
    # The earlier prompt's turn is not this one: it was before the check began.
    assert TranscriptCheck(spec, tmp_path, {}, "please PLANME now").confirmed() is None


def test_gemini_chat_of_a_new_session_is_read_from_its_start(tmp_path: pathlib.Path) -> None:
    spec = TranscriptSpec(format="gemini", locate="file", path="chat.jsonl")
    check = TranscriptCheck(spec, tmp_path, {}, "please PLANME now")  # no chat yet
    lines = _gemini_lines()
    (tmp_path / "chat.jsonl").write_text("".join(lines[:6]))  # up to the plan's message
    found = check.confirmed()
    assert found is not None and found[1] == "gemini transcript chat.jsonl holds the prompt"
    assert check.turn_over() is not None


def _opencode(tmp_path: pathlib.Path) -> tuple[TranscriptSpec, pathlib.Path, dict[str, str]]:
    path = tmp_path / "data" / "opencode" / "opencode.db"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.executescript((FIXTURES / "opencode-session.sql").read_text("utf-8"))
    spec = TranscriptSpec(format="opencode", locate="opencode-data")
    return spec, path, {"XDG_DATA_HOME": str(tmp_path / "data")}


def test_opencode_rows_confirm_the_prompt_and_say_when_its_turn_is_over(
    tmp_path: pathlib.Path,
) -> None:
    spec, path, env = _opencode(tmp_path)
    project = pathlib.Path("/home/dev/project")
    text = "Please plan. REALCLI-OPENCODE-LOG nonce=5c0ffe"
    check = TranscriptCheck(spec, project, env, text)
    # Rows older than the paste are not this prompt's.
    assert check.confirmed() is None and check.turn_over() is None
    check.since_ms = 1795444012000  # just before the user's message was written
    found = check.confirmed()
    assert found == ("transcript", "opencode transcript opencode.db holds the prompt")
    assert check.turn_over() == "opencode transcript: assistant message complete (finish: stop)"
    assert TranscriptCheck(spec, project, env, "another prompt").turn_over() is None

    def assistant(update: t.Callable[[dict[str, t.Any]], None]) -> None:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            sql = "SELECT data FROM message WHERE data LIKE '%assistant%'"
            (data,) = db.execute(sql).fetchone()
            obj = json.loads(data)
            update(obj)
            db.execute("UPDATE message SET data = ? WHERE data = ?", (json.dumps(obj), data))

    assistant(lambda m: m.update(finish="tool-calls"))  # it asked for a tool: not over
    assert check.turn_over() is None
    assistant(lambda m: m.update(finish="stop", time={"created": 1}))  # still streaming
    assert check.turn_over() is None
    assistant(lambda m: m["time"].update(completed=2))
    assert check.turn_over() is not None


class GeminiLog:
    """A Gemini-style chat for the fake agent, written from its log as Gemini CLI would.

    ``turn_end=False`` writes the model's message without its tokens, as if the turn never
    completed in the transcript.
    """

    def __init__(self, log: pathlib.Path, chat: pathlib.Path, *, turn_end: bool = True) -> None:
        self.log, self.chat, self.turn_end = log, chat, turn_end
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> t.Self:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 30)

    def _write(self, record: dict[str, t.Any]) -> None:
        with self.chat.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    async def _run(self) -> None:
        seen = 0
        async for _ in watchfiles.awatch(self.log.parent, stop_event=self._stop, step=20):
            events = read_log(self.log) if self.log.exists() else []
            for n, e in enumerate(events[seen:], seen):
                if e.get("event") == "prompt":
                    text = decode_text(e["text"]).decode("utf-8", "replace")
                    self._write({"id": f"u{n}", "type": "user", "content": [{"text": text}]})
                elif e.get("event") == "reply":
                    reply: dict[str, t.Any] = {"id": f"m{n}", "type": "gemini", "content": "ok"}
                    if self.turn_end:
                        reply["tokens"] = {"total": 9}
                    self._write(reply)
            seen = len(events)


async def _start(
    tmux_server: TmuxServer, client: ControlClient, tmp_path: pathlib.Path, store: RunStore
) -> AgentDriver:
    spec = TranscriptSpec(format="gemini", locate="file", path="chat.jsonl")
    profile = load_profile("fake-claude").model_copy(update={"transcript": spec})
    driver = await AgentDriver.start(
        "AGENT",
        profile,
        argv=scenario(tmp_path, DONE_RULE.format(extra="")),
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        store=store,
        hooks=False,
    )
    driver.hook_grace = GRACE
    return driver


async def test_turn_ends_on_the_transcript_where_no_hook_says_so(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    driver = await _start(tmux_server, tmux_session, tmp_path, store)
    assert await driver.hook_receipts() is None
    async with GeminiLog(tmp_path / "fa", tmp_path / "chat.jsonl"):
        result = await driver.run_turn(prompt("G1"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    # No hooks, and a chat that also tells the turn's end: it is the agent's word on the
    # delivery too, so it is waited for.
    assert result.delivery is not None
    assert set(result.delivery.sources) == {"screen", "transcript"}, result.delivery
    assert "gemini transcript chat.jsonl holds the prompt" in result.delivery.evidence
    assert result.ended_by == "transcript+screen", result
    assert result.drift == ()
    assert [e for e in store.list_events() if e.kind == "drift"] == []
    await driver.kill()
    store.close()


async def test_screen_says_over_but_the_transcript_never_does_is_drift(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    driver = await _start(tmux_server, tmux_session, tmp_path, store)
    async with GeminiLog(tmp_path / "fa", tmp_path / "chat.jsonl", turn_end=False):
        result = await driver.run_turn(prompt("G2"), Expect.block("done"), timeout=TURN)
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.ended_by == "screen"
    want = f"turn-end: transcript says no turn end in it within {GRACE:g}s; screen says ready"
    assert result.drift == (want,)
    assert [e.detail for e in store.list_events() if e.kind == "drift"] == [want]
    await driver.kill()
    store.close()
