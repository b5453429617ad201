"""Transcript readers for Gemini CLI (chat JSONL) and opencode (SQLite), on real files.

``fixtures/transcripts/gemini-session.jsonl`` is a chat Gemini CLI 0.61.0 wrote (a plan,
then a shell tool call, whose message it wrote twice, then a done block);
``opencode-session.sql`` is the session, message and part rows opencode 1.18.33 wrote for
a reply holding a block and 80 lines after it. Paths were rewritten to /home/dev.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sqlite3
import typing as t

import pytest

from politerm.agents import load_profile
from politerm.agents.profile import TranscriptSpec
from politerm.driver.blocks import BlockReader
from politerm.driver.receipts import Receipts
from politerm.driver.transcripts import hooked_home, locate_transcript, open_tail
from politerm.hooks.channel import HookChannel
from politerm.protocol import BlockParser
from politerm.protocol.opencode_db import OpencodeTail
from politerm.protocol.transcript import TranscriptTail, read_transcript

if t.TYPE_CHECKING:
    from politerm.terminal import Terminal

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "transcripts"
PROJECT = pathlib.Path("/home/dev/project")
GEMINI = TranscriptSpec(format="gemini", locate="gemini-projects")
OPENCODE = TranscriptSpec(format="opencode", locate="opencode-data")


def _parser() -> BlockParser:
    return BlockParser(detect_echo=False)


# --- Gemini CLI ---------------------------------------------------------------------------


def test_gemini_chat_gives_each_model_message_once() -> None:
    texts = read_transcript(FIXTURES / "gemini-session.jsonl", "gemini")
    # The tool-call message was written twice (tokens, then toolCalls): read once.
    assert len(texts) == 3
    assert texts[0].startswith("Here is the plan.")
    assert texts[1] == "Writing the file."
    assert texts[2].startswith("Done.")
    # The user's prompts are not the assistant's text.
    assert not any("please PLANME now" in x for x in texts)


def test_gemini_chat_blocks_are_the_raw_text() -> None:
    tail = TranscriptTail(FIXTURES / "gemini-session.jsonl", "gemini")
    blocks = tail.feed(_parser())
    assert [(b.type, b.id) for b in blocks] == [("plan", "T1"), ("done", "T2")]
    # Not wrapped, not numbered: exactly what the model wrote.
    assert blocks[0].body_lines[0].startswith("1. do the thing alpha bravo")
    assert blocks[0].body_lines[0].endswith("four five six seven")
    assert blocks[1].body == "DONE out.txt"


def test_gemini_chat_read_as_it_grows(tmp_path: pathlib.Path) -> None:
    lines = (FIXTURES / "gemini-session.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"
    tail = TranscriptTail(path, "gemini")
    parser = _parser()
    got = []
    with path.open("wb") as fh:
        for line in lines:
            # Half a line first: the writer may be in the middle of it.
            fh.write(line[: len(line) // 2])
            fh.flush()
            got.extend(tail.feed(parser))
            fh.write(line[len(line) // 2 :])
            fh.flush()
            got.extend(tail.feed(parser))
        # A message written again with other text counts again.
        changed = {"id": "again", "type": "gemini", "content": "one"}
        fh.write((json.dumps(changed) + "\n").encode())
        fh.write((json.dumps({**changed, "content": [{"text": "two"}]}) + "\n").encode())
        fh.write((json.dumps({**changed, "content": [{"text": "two"}]}) + "\n").encode())
    assert [b.id for b in got] == ["T1", "T2"]
    assert tail.read_new() == ["one", "two"]


def _gemini_home(tmp_path: pathlib.Path, workdir: pathlib.Path, short: str) -> pathlib.Path:
    chats = tmp_path / ".gemini" / "tmp" / short / "chats"
    chats.mkdir(parents=True)
    shutil.copy(
        FIXTURES / "gemini-session.jsonl", chats / "session-2026-11-23T14-28-d5c3a499.jsonl"
    )
    (chats.parent / ".project_root").write_text(str(workdir))
    return chats


def test_gemini_chat_is_found_by_the_project_registry(tmp_path: pathlib.Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    chats = _gemini_home(tmp_path, workdir, "work-1")
    (tmp_path / ".gemini" / "projects.json").write_text(
        json.dumps({"projects": {str(workdir): "work-1"}})
    )
    older = chats / "session-2026-11-22T10-00-00000000.jsonl"
    older.write_text("")
    os.utime(older, (1, 1))
    found = locate_transcript(GEMINI, workdir, {"HOME": str(tmp_path)})
    assert found is not None and found.name == "session-2026-11-23T14-28-d5c3a499.jsonl"
    # Without the registry, the folder's .project_root names the project.
    (tmp_path / ".gemini" / "projects.json").unlink()
    assert locate_transcript(GEMINI, workdir, {"HOME": str(tmp_path)}) == found
    # GEMINI_CLI_HOME moves the whole ~/.gemini.
    env = {"HOME": "/nonexistent", "GEMINI_CLI_HOME": str(tmp_path)}
    assert locate_transcript(GEMINI, workdir, env) == found
    assert locate_transcript(GEMINI, tmp_path / "other", {"HOME": str(tmp_path)}) is None


# --- opencode -----------------------------------------------------------------------------


def _opencode_db(data_home: pathlib.Path) -> pathlib.Path:
    path = data_home / "opencode" / "opencode.db"
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.executescript((FIXTURES / "opencode-session.sql").read_text("utf-8"))
    return path


def test_opencode_database_gives_finished_assistant_text(tmp_path: pathlib.Path) -> None:
    path = _opencode_db(tmp_path)
    tail = OpencodeTail(path, PROJECT)
    (text,) = tail.read_new()
    assert text.startswith("```\n[[POLI:MSG ")
    assert text.rstrip().endswith("Note 80: nothing else to add here.")
    assert tail.read_new() == []
    # Another directory's session is not this agent's.
    assert OpencodeTail(path, pathlib.Path("/home/dev/elsewhere")).read_new() == []


def test_opencode_block_and_a_part_still_streaming(tmp_path: pathlib.Path) -> None:
    path = _opencode_db(tmp_path)
    tail = OpencodeTail(path, PROJECT)
    parser = _parser()
    (block,) = tail.feed(parser)
    assert (block.type, block.id, block.nonce) == ("plan", "T1", "5c0ffe")
    assert block.body_lines == ["1. do the thing", "2. check the thing"]
    with sqlite3.connect(path) as db:
        session, message = db.execute(
            'SELECT session_id, id FROM message WHERE data LIKE \'%"role":"assistant"%\''
        ).fetchone()
        streaming = {"type": "text", "text": "[[POLI:MSG {", "time": {"start": 5}}
        db.execute(
            "INSERT INTO part VALUES ('prt_z', ?, ?, 9e12, 9e12, ?)",
            (message, session, json.dumps(streaming)),
        )
    assert tail.read_new() == []  # not finished: not read, and not marked read
    with sqlite3.connect(path) as db:
        done = {"type": "text", "text": "All done.", "time": {"start": 5, "end": 6}}
        db.execute("UPDATE part SET data = ? WHERE id = 'prt_z'", (json.dumps(done),))
    assert tail.read_new() == ["All done."]


def test_opencode_missing_or_broken_database_reads_nothing(tmp_path: pathlib.Path) -> None:
    assert OpencodeTail(tmp_path / "none.db", PROJECT).read_new() == []
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database at all" * 100)
    assert OpencodeTail(broken, PROJECT).read_new() == []


def test_opencode_profile_recovers_a_block_the_screen_lost(tmp_path: pathlib.Path) -> None:
    home = tmp_path / "home"
    path = _opencode_db(home / ".local" / "share")
    assert locate_transcript(OPENCODE, PROJECT, {"HOME": str(home)}) == path
    assert locate_transcript(OPENCODE, PROJECT, {"XDG_DATA_HOME": str(tmp_path)}) is None
    assert isinstance(open_tail(OPENCODE, path, PROJECT), OpencodeTail)
    # The screen shows only the notes after the block (it scrolled off the alternate screen).
    reader = BlockReader(
        "AGENT",
        load_profile("opencode"),
        t.cast("Terminal", None),  # scan() reads the lines it is given, never the terminal
        cwd=PROJECT,
        env={"HOME": str(home)},
    )
    screen = [f"     Note {i}: nothing else to add here." for i in range(40, 81)]
    blocks, rejections = reader.scan(screen, "5c0ffe")
    assert rejections == []
    assert [(b.type, b.id) for b in blocks] == [("plan", "T1")]
    assert ("5c0ffe", "plan", "T1") in reader.transcript_blocks


@pytest.mark.parametrize("name", ["gemini", "opencode"])
def test_profiles_name_their_transcripts(name: str) -> None:
    spec = load_profile(name).transcript
    assert spec is not None and spec.format == name


def test_reader_follows_a_newer_gemini_chat(tmp_path: pathlib.Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    chats = tmp_path / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(workdir))
    first = chats / "session-2026-11-23T14-00-aaaaaaaa.jsonl"
    first.write_text('{"id":"m0","type":"gemini","content":"Starting up."}\n')
    os.utime(first, (1, 1))
    reader = BlockReader(
        "AGENT",
        load_profile("gemini"),
        t.cast("Terminal", None),  # scan() reads the lines it is given, never the terminal
        cwd=workdir,
        env={"HOME": str(tmp_path)},
    )
    assert reader.scan([], None) == ([], [])
    # Gemini CLI starts another log (a prompt queued during its start-up).
    shutil.copy(
        FIXTURES / "gemini-session.jsonl", chats / "session-2026-11-23T14-28-d5c3a499.jsonl"
    )
    blocks, _ = reader.scan([], None)
    assert [(b.type, b.id) for b in blocks] == [("plan", "T1"), ("done", "T2")]


def test_gemini_chat_is_looked_for_in_the_hooks_session_home(tmp_path: pathlib.Path) -> None:
    channel = tmp_path / "AGENT.hooks.jsonl"
    channel.write_text("")
    env = {"HOME": "/home/dev"}
    hooked_home(GEMINI, env, Receipts("gemini", HookChannel(channel)))
    assert env["GEMINI_CLI_HOME"] == str(tmp_path / "AGENT.hooks.gemini-home")
    # Set already, another CLI's receipts, no receipts, another transcript: left alone.
    hooked_home(GEMINI, env, Receipts("gemini", HookChannel(tmp_path / "B.hooks.jsonl")))
    assert env["GEMINI_CLI_HOME"] == str(tmp_path / "AGENT.hooks.gemini-home")
    for spec, rc in [
        (GEMINI, Receipts("claude", HookChannel(channel))),
        (GEMINI, None),
        (OPENCODE, Receipts("gemini", HookChannel(channel))),
    ]:
        other: dict[str, str] = {}
        hooked_home(spec, other, rc)
        assert other == {}


def test_opencode_tokens_counted_from_its_step_finish_parts(tmp_path: pathlib.Path) -> None:
    from politerm.driver.tokens import TokenMeter, stored_tokens
    from politerm.protocol.usage import Usage
    from politerm.store import RunStore

    data_home = tmp_path / "data"
    _opencode_db(data_home)
    env = {"XDG_DATA_HOME": str(data_home)}
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        meter = TokenMeter("OC", load_profile("opencode"), cwd=PROJECT, env=env, store=store)
        assert meter.works
        meter.start_turn("T1")  # the reply already there is an earlier turn's
        assert meter.poll() == Usage()
        path = data_home / "opencode" / "opencode.db"
        with sqlite3.connect(path) as db:
            session, message = db.execute(
                'SELECT session_id, id FROM message WHERE data LIKE \'%"role":"assistant"%\''
            ).fetchone()
            step = {
                "type": "step-finish",
                "tokens": {"input": 12, "output": 30, "reasoning": 8, "cache": {"read": 100}},
            }
            db.execute(
                "INSERT INTO part VALUES ('prt_step2', ?, ?, 9e12, 9e12, ?)",
                (message, session, json.dumps(step)),
            )
        assert meter.poll() == Usage(112, 38, 100)
        assert meter.poll() == Usage()  # each part once
        assert meter.end_turn() == Usage(112, 38, 100)
        assert stored_tokens(store, "task:T1") == Usage(112, 38, 100)
        assert any(e.kind == "tokens" for e in store.list_events())
