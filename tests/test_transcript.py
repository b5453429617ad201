"""Transcript readers: the assistant's own text, which no renderer has touched."""

from __future__ import annotations

import json
import os
import pathlib
import typing as t

import pytest

from politerm.protocol import (
    Block,
    BlockParser,
    TranscriptFormat,
    TranscriptTail,
    cross_check,
    parse_blocks,
    read_transcript,
    render_block,
)
from politerm.protocol.transcript import (
    claude_project_dir,
    latest_claude_session,
    latest_codex_rollout,
)

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
NONCE = "c0ffee"

# The exact reply the mock model sent for T3 (see realcli.md); the screens show it mangled.
T3_RAW = (
    '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T3","note":"this header is deliberately '
    "long so that it must wrap across the terminal width of two hundred columns: alpha bravo "
    'charlie delta echo foxtrot golf hotel","blob":"5feceb666b86b273d4735e3a4e0740854b227777ef2d'
    '127de7f6c0117902699b2c62423219581e274a44dc154fc82b266b51d4313fdba35f8527a891e629fa65"}]]\n'
    "<PLAN>\n"
    "1. a step whose text is also very long: lorem ipsum dolor sit amet consectetur adipiscing "
    "elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim "
    "veniam quis nostrud\n"
    "   - nested *emphasis* and `code` and __dunder__ and <b>html</b>\n"
    "</PLAN>\n"
    "[[/POLI:MSG]]"
)

REPLY = "Here is the plan.\n\n" + render_block(
    {"to": "EXECUTER", "type": "plan", "id": "T1", "nonce": NONCE},
    "1. do the thing\n2. check the thing",
    inner_tag="PLAN",
)
PROMPT_WITH_BLOCK = render_block(
    {"to": "EXECUTER", "type": "plan", "id": "T0", "nonce": NONCE}, "from the user"
)


def _jsonl(*objs: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


CLAUDE_LOG = _jsonl(
    {"type": "summary", "summary": "a session", "leafUuid": "x"},
    {"type": "user", "message": {"role": "user", "content": PROMPT_WITH_BLOCK}},
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "[[POLI:MSG hmm"}],
        },
    },
    {
        "type": "assistant",
        "isSidechain": True,
        "message": {"role": "assistant", "content": [{"type": "text", "text": PROMPT_WITH_BLOCK}]},
    },
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": REPLY},
                {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
)

CODEX_LOG = _jsonl(
    {"timestamp": "t", "type": "session_meta", "payload": {"id": "s", "cli_version": "0.169.0"}},
    {
        "timestamp": "t",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": PROMPT_WITH_BLOCK}],
        },
    },
    {"timestamp": "t", "type": "event_msg", "payload": {"type": "agent_message", "message": REPLY}},
    {
        "timestamp": "t",
        "type": "response_item",
        "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "x"}]},
    },
    {
        "timestamp": "t",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": REPLY}],
        },
    },
)

AIDER_LOG = (
    "\n# aider chat started at 2026-01-01 10:00:00\n\n"
    "> /opt/venv/bin/aider --model openai/mock\n"
    "> Aider v0.86.2\n\n"
    + "".join(f"#### {ln}\n" for ln in PROMPT_WITH_BLOCK.splitlines())
    + "\n"
    + REPLY
    + "\n\n> Tokens: 598 sent, 56 received.\n\n#### next prompt\n"
)


class LogCase(t.NamedTuple):
    test_id: str
    fmt: TranscriptFormat
    name: str
    content: str


LOG_CASES = [
    LogCase("claude", TranscriptFormat.CLAUDE, "session.jsonl", CLAUDE_LOG),
    LogCase("codex", TranscriptFormat.CODEX, "rollout-2026-01-01T10-00-00-abc.jsonl", CODEX_LOG),
    LogCase("aider", TranscriptFormat.AIDER, ".aider.chat.history.md", AIDER_LOG),
]


@pytest.mark.parametrize("case", LOG_CASES, ids=[c.test_id for c in LOG_CASES])
def test_reader_yields_only_the_assistant_block(case: LogCase, tmp_path: pathlib.Path) -> None:
    path = tmp_path / case.name
    path.write_text(case.content, encoding="utf-8")
    texts = read_transcript(path, case.fmt)
    assert any("Here is the plan." in x for x in texts)
    assert not any("from the user" in x for x in texts)
    found = parse_blocks("\n".join(texts), nonce=NONCE, detect_echo=False)
    assert [(b.id, b.body_lines) for b in found.blocks] == [
        ("T1", ["1. do the thing", "2. check the thing"])
    ]
    assert found.rejections == []


@pytest.mark.parametrize("case", LOG_CASES, ids=[c.test_id for c in LOG_CASES])
def test_tail_is_incremental(case: LogCase, tmp_path: pathlib.Path) -> None:
    path = tmp_path / case.name
    tail = TranscriptTail(path, case.fmt)
    parser = BlockParser(nonce=NONCE, detect_echo=False)
    assert tail.feed(parser) == []  # no file yet
    data = case.content.encode("utf-8")
    got: list[Block] = []
    with path.open("wb") as fh:
        # Written in uneven pieces, as a CLI flushing mid-line would.
        for i in range(0, len(data), 97):
            fh.write(data[i : i + 97])
            fh.flush()
            got += tail.feed(parser)
    assert [b.id for b in got] == ["T1"]
    assert tail.offset == len(data)
    assert tail.read_new() == []


def test_tail_waits_for_the_end_of_a_jsonl_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    line = CLAUDE_LOG.splitlines(keepends=True)[-2]
    path.write_text(line[:-10], encoding="utf-8")
    tail = TranscriptTail(path, "claude")
    assert tail.read_new() == []
    assert tail.offset == 0
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line[-10:])
    assert tail.read_new() == [REPLY]


def test_tail_skip_to_end_and_truncation(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(CODEX_LOG, encoding="utf-8")
    tail = TranscriptTail(path, TranscriptFormat.CODEX)
    tail.skip_to_end()
    assert tail.read_new() == []
    path.write_text(CODEX_LOG.splitlines(keepends=True)[-1], encoding="utf-8")
    # The file shrank (a new session reusing the name): read it from the start.
    assert tail.read_new() == [REPLY]


def test_unknown_and_broken_lines_are_skipped(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        "not json\n[1,2]\n{}\n" + '{"type":"assistant","message":"x"}\n' + CLAUDE_LOG,
        encoding="utf-8",
    )
    assert read_transcript(path, "claude") == [REPLY]


def test_aider_notes_and_prompts_cannot_join_a_block(tmp_path: pathlib.Path) -> None:
    # A block opened by the assistant and "closed" inside a user prompt stays unclosed.
    path = tmp_path / ".aider.chat.history.md"
    opened = REPLY.rsplit("\n", 1)[0]
    path.write_text(f"{opened}\n#### [[/POLI:MSG]]\n", encoding="utf-8")
    parser = BlockParser(nonce=NONCE, detect_echo=False)
    tail = TranscriptTail(path, "aider")
    assert tail.feed(parser) == []
    assert parser.pending is not None


# --- cross-checking screen against transcript -------------------------------------------

T3_SCREENS = [
    "claude-04-long.txt",
    "codex-04-long.txt",
    "codex-inline-99-history.txt",
    "gemini-04-long.txt",
    "opencode-04-long.txt",
    "aider-04-long.txt",
    "aider-raw-04-long.txt",
]


@pytest.mark.parametrize("name", T3_SCREENS)
def test_screen_block_agrees_with_transcript(name: str) -> None:
    (raw,) = parse_blocks(T3_RAW, detect_echo=False).blocks
    screen = next(
        b for b in parse_blocks((SCREENS / name).read_text(encoding="utf-8")).blocks if b.id == "T3"
    )
    check = cross_check(screen, raw)
    assert check.agree, check.mismatches
    assert bool(check)
    # Rendering damage aside, a redraw and the transcript are the same message.
    assert screen.dedupe_key == raw.dedupe_key


def test_cross_check_reports_differences() -> None:
    (raw,) = parse_blocks(T3_RAW, detect_echo=False).blocks
    other = Block(raw.to, raw.type, "T4", raw.body.replace("nostrud", "exercitation"), raw.header)
    check = cross_check(other, raw)
    assert not check
    assert check.mismatches[0] == "id: 'T4' != 'T3'"
    assert check.mismatches[1].startswith("body differs at character ")
    assert "exercitation" in check.mismatches[1]


# --- locating transcripts ---------------------------------------------------------------


def test_claude_project_dir_and_latest_session(tmp_path: pathlib.Path) -> None:
    config = tmp_path / ".claude"
    folder = claude_project_dir(pathlib.Path("/home/dev/my_project.x"), config)
    assert folder == config / "projects" / "-home-dev-my-project-x"
    folder.mkdir(parents=True)
    old, new, agent = folder / "a.jsonl", folder / "b.jsonl", folder / "agent-1.jsonl"
    for i, p in enumerate((old, new, agent)):
        p.write_text("{}\n", encoding="utf-8")
        os.utime(p, (1000 + i, 1000 + i))
    assert latest_claude_session(pathlib.Path("/home/dev/my_project.x"), config) == new
    assert latest_claude_session(pathlib.Path("/elsewhere"), config) is None


def test_latest_codex_rollout(tmp_path: pathlib.Path) -> None:
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    first, second = day / "rollout-1.jsonl", day / "rollout-2.jsonl"
    for i, p in enumerate((first, second)):
        p.write_text("", encoding="utf-8")
        os.utime(p, (2000 + i, 2000 + i))
    (day / "other.jsonl").write_text("", encoding="utf-8")
    assert latest_codex_rollout(tmp_path) == second
    assert latest_codex_rollout(tmp_path / "nothing") is None
