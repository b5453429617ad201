"""The POLI:MSG contract: parsing real rendered screens and every quirk realcli.md lists."""

from __future__ import annotations

import hashlib
import json
import logging
import pathlib
import textwrap
import typing as t

import pytest

from politerm.errors import BlockRejected, ProtocolError
from politerm.protocol import (
    Block,
    BlockParser,
    MessageType,
    header_template,
    last_prompt_line,
    normalise_body,
    parse_blocks,
    parse_header,
    render_block,
    render_primer,
    resolve_file_body,
)

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"

LONG_STEP = (
    "a step whose text is also very long: lorem ipsum dolor sit amet consectetur adipiscing "
    "elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim "
    "veniam quis nostrud"
)
LONG_NOTE = (
    "this header is deliberately long so that it must wrap across the terminal width of two "
    "hundred columns: alpha bravo charlie delta echo foxtrot golf hotel"
)
BLOB = (
    "5feceb666b86b273d4735e3a4e0740854b227777ef2d127de7f6c0117902699b"
    "2c62423219581e274a44dc154fc82b266b51d4313fdba35f8527a891e629fa65"
)


class Expected(t.NamedTuple):
    to: str
    type: str
    id: str
    body_lines: tuple[str, ...]


T1 = Expected("EXECUTER", "plan", "T1", ("1. do the thing", "2. check the thing"))
# aider's pretty renderer drops <PLAN>/</PLAN> and the dots after list numbers.
T1_AIDER = Expected("EXECUTER", "plan", "T1", ("1 do the thing", "2 check the thing"))
T2 = Expected("ORCH", "done", "T2", ("DONE out.txt",))
T3_CLAUDE = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (f"1. {LONG_STEP}", "  - nested emphasis and code and dunder and <b>html</b>"),
)
T3_CODEX = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (f"1. {LONG_STEP}", "    • nested emphasis and code and dunder and <b>html</b>"),
)
T3_GEMINI = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (f"1. {LONG_STEP}", "   - nested emphasis and code and __dunder__ and <b>html</b>"),
)
# opencode wraps the long list item itself, with a 3-space continuation.
T3_OPENCODE = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (
        f"1. {LONG_STEP.removesuffix(' nostrud')}",
        "   nostrud",
        "   - nested emphasis and code and dunder and <b>html</b>",
    ),
)
T3_AIDER = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (f"1 {LONG_STEP}", "   • nested emphasis and code and dunder and html"),
)
T3_AIDER_RAW = Expected(
    "EXECUTER",
    "plan",
    "T3",
    (f"1. {LONG_STEP}", "   - nested *emphasis* and `code` and __dunder__ and <b>html</b>"),
)

# Gemini CLI with its default line numbers, a body line wrapped by the CLI (see
# tests/test_protocol_numbered.py for the long one).
NUMBERED_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu one two "
    "three four five six seven"
)
T1_NUMBERED = Expected(
    "EXECUTER", "plan", "T1", (f"1. do the thing {NUMBERED_WORDS}", "2. check the thing")
)
T2_NUMBERED = Expected(
    "EXECUTER",
    "plan",
    "T2",
    (
        *(f"{n}. step {n}" for n in range(1, 12)),
        f"12. the last step {NUMBERED_WORDS} {NUMBERED_WORDS}",
    ),
)


class ScreenCase(t.NamedTuple):
    test_id: str
    file: str
    expected: tuple[Expected, ...]


SCREEN_CASES = [
    ScreenCase("aider-plan", "aider-01-plan.txt", (T1_AIDER,)),
    ScreenCase("aider-tool-done", "aider-02-tool-done.txt", (T1_AIDER,)),
    ScreenCase("aider-busy", "aider-03-busy.txt", (T1_AIDER,)),
    ScreenCase("aider-long", "aider-04-long.txt", (T1_AIDER, T3_AIDER)),
    ScreenCase("aider-history", "aider-99-history.txt", (T1_AIDER, T3_AIDER)),
    ScreenCase("aider-history-ansi", "aider-99-history.ansi.txt", (T1_AIDER, T3_AIDER)),
    ScreenCase("aider-raw-plan", "aider-raw-01-plan.txt", (T1,)),
    ScreenCase("aider-raw-tool-done", "aider-raw-02-tool-done.txt", (T1,)),
    ScreenCase("aider-raw-busy", "aider-raw-03-busy.txt", (T1,)),
    ScreenCase("aider-raw-long", "aider-raw-04-long.txt", (T1, T3_AIDER_RAW)),
    ScreenCase("aider-raw-history", "aider-raw-99-history.txt", (T1, T3_AIDER_RAW)),
    ScreenCase("aider-raw-history-ansi", "aider-raw-99-history.ansi.txt", (T1, T3_AIDER_RAW)),
    ScreenCase("claude-plan", "claude-01-plan.txt", (T1,)),
    ScreenCase("claude-tool-approval", "claude-02-tool-approval.txt", (T1,)),
    ScreenCase("claude-tool-done", "claude-02-tool-done.txt", (T1, T2)),
    ScreenCase("claude-busy", "claude-03-busy.txt", (T1, T2)),
    ScreenCase("claude-long", "claude-04-long.txt", (T1, T2, T3_CLAUDE)),
    ScreenCase("claude-history", "claude-99-history.txt", (T1, T2, T3_CLAUDE)),
    ScreenCase("claude-history-ansi", "claude-99-history.ansi.txt", (T1, T2, T3_CLAUDE)),
    ScreenCase("codex-plan", "codex-01-plan.txt", (T1,)),
    ScreenCase("codex-tool-done", "codex-02-tool-done.txt", (T1, T2)),
    ScreenCase("codex-busy", "codex-03-busy.txt", (T1, T2)),
    # Alternate screen: T1 has scrolled away, and its orphaned closing tag must not matter.
    ScreenCase("codex-long", "codex-04-long.txt", (T2, T3_CODEX)),
    ScreenCase("codex-history", "codex-99-history.txt", (T2, T3_CODEX)),
    ScreenCase("codex-history-ansi", "codex-99-history.ansi.txt", (T2, T3_CODEX)),
    ScreenCase("codex-inline-plan", "codex-inline-01-plan.txt", (T1,)),
    ScreenCase("codex-inline-tool-done", "codex-inline-02-tool-done.txt", (T1, T2)),
    ScreenCase("codex-inline-busy", "codex-inline-03-busy.txt", (T1, T2)),
    ScreenCase("codex-inline-long", "codex-inline-04-long.txt", (T2, T3_CODEX)),
    ScreenCase("codex-inline-history", "codex-inline-99-history.txt", (T1, T2, T3_CODEX)),
    ScreenCase("codex-inline-history-ansi", "codex-inline-99-history.ansi.txt", (T1, T2, T3_CODEX)),
    ScreenCase("gemini-plan", "gemini-01-plan.txt", (T1,)),
    ScreenCase("gemini-tool-approval", "gemini-02-tool-approval.txt", (T1,)),
    ScreenCase("gemini-tool-done", "gemini-02-tool-done.txt", (T1, T2)),
    ScreenCase("gemini-busy", "gemini-03-busy.txt", (T1, T2)),
    ScreenCase("gemini-long", "gemini-04-long.txt", (T1, T2, T3_GEMINI)),
    ScreenCase("gemini-history", "gemini-99-history.txt", (T1, T2, T3_GEMINI)),
    ScreenCase("gemini-history-ansi", "gemini-99-history.ansi.txt", (T1, T2, T3_GEMINI)),
    # The loop detector cut T3 off mid-header: T1 and T2 only, T3 rejected.
    ScreenCase("gemini-loop-detection", "gemini-loop-detection-dialog.txt", (T1, T2)),
    ScreenCase("gemini-numbered-wrap", "gemini-numbered-01-wrap.txt", (T1_NUMBERED,)),
    ScreenCase("gemini-numbered-long", "gemini-numbered-02-long.txt", (T2_NUMBERED,)),
    ScreenCase("opencode-plan", "opencode-01-plan.txt", (T1,)),
    ScreenCase("opencode-tool-done", "opencode-02-tool-done.txt", (T1, T2)),
    ScreenCase("opencode-busy", "opencode-03-busy.txt", (T1, T2)),
    ScreenCase("opencode-long", "opencode-04-long.txt", (T2, T3_OPENCODE)),
    ScreenCase("opencode-history", "opencode-99-history.txt", (T2, T3_OPENCODE)),
    ScreenCase("opencode-history-ansi", "opencode-99-history.ansi.txt", (T2, T3_OPENCODE)),
]


def _screen(name: str) -> str:
    return (SCREENS / name).read_text(encoding="utf-8")


def _screens_with_blocks() -> set[str]:
    return {p.name for p in SCREENS.glob("*.txt") if "POLI:MSG" in p.read_text(encoding="utf-8")}


def _screens_without_blocks() -> list[str]:
    return sorted(
        p.name for p in SCREENS.glob("*.txt") if "POLI:MSG" not in p.read_text(encoding="utf-8")
    )


def test_every_screen_with_a_block_has_a_case() -> None:
    assert _screens_with_blocks() == {c.file for c in SCREEN_CASES}


@pytest.mark.parametrize("case", SCREEN_CASES, ids=[c.test_id for c in SCREEN_CASES])
def test_real_screen(case: ScreenCase) -> None:
    found = parse_blocks(_screen(case.file))
    got = [Expected(b.to, b.type, b.id, tuple(b.body_lines)) for b in found.blocks]
    assert got == list(case.expected)
    for block in found.blocks:
        assert block.nonce is None
        if block.id == "T3":
            # The wrapped header was rejoined with the space the wrap swallowed.
            assert block.header["note"] == LONG_NOTE
            assert block.header["blob"] == BLOB


@pytest.mark.parametrize("name", _screens_without_blocks())
def test_screen_without_block(name: str) -> None:
    found = parse_blocks(_screen(name))
    assert found.blocks == []
    assert found.rejections == []


def test_loop_detection_screen_rejects_the_cut_header() -> None:
    found = parse_blocks(_screen("gemini-loop-detection-dialog.txt"))
    assert [r.reason for r in found.rejections] == ["header does not end with '}]]'"]
    assert '"id":"T3"' in found.rejections[0].text


# --- formats --------------------------------------------------------------------------

HEADER = {"to": "EXECUTER", "type": "plan", "id": "T1"}
PLAIN = render_block(HEADER, "1. do the thing\n2. check the thing", inner_tag="PLAN")


def test_plain_unfenced_round_trip() -> None:
    (block,) = parse_blocks(PLAIN).blocks
    assert (block.to, block.type, block.id) == ("EXECUTER", "plan", "T1")
    assert block.body == "1. do the thing\n2. check the thing"
    assert block.kind is MessageType.PLAN
    assert block.raw_lines[0] == '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]'


def test_fenced_format_ignores_fence_lines() -> None:
    text = f"Here it is:\n\n```\n{PLAIN}\n```\n\nbye"
    (block,) = parse_blocks(text).blocks
    assert block.body_lines == ["1. do the thing", "2. check the thing"]


def test_fenced_and_rendered_with_gutter() -> None:
    rendered = "● Here it is:\n\n" + textwrap.indent(f"```text\n{PLAIN}\n```", "  ")
    (block,) = parse_blocks(rendered).blocks
    assert block.body_lines == ["1. do the thing", "2. check the thing"]


def test_fence_opened_inside_block_is_dropped() -> None:
    text = PLAIN.replace("<PLAN>\n", "<PLAN>\n```\n")
    (block,) = parse_blocks(text).blocks
    assert block.body_lines == ["1. do the thing", "2. check the thing"]


def test_block_without_inner_tags() -> None:
    (block,) = parse_blocks(render_block(HEADER, "just text")).blocks
    assert block.body == "just text"


def test_one_line_block() -> None:
    text = '[[POLI:MSG {"to":"ORCH","type":"done","id":"T2"}]] DONE out.txt [[/POLI:MSG]]'
    (block,) = parse_blocks(text).blocks
    assert (block.type, block.body) == ("done", "DONE out.txt")


def test_single_brackets_and_emphasis_around_tags() -> None:
    text = '**[POLI:MSG {"to":"ORCH","type":"status","id":"T9"}]**\nbusy\n`[/POLI:MSG]`'
    (block,) = parse_blocks(text).blocks
    assert (block.type, block.body) == ("status", "busy")


def test_unknown_type_and_extra_keys_are_kept() -> None:
    header = {**HEADER, "type": "ack", "priority": 2, "tags": ["a", "b"]}
    (block,) = parse_blocks(render_block(header, "ok")).blocks
    assert block.type == "ack"
    assert block.kind is None
    assert block.header["priority"] == 2
    assert block.header["tags"] == ["a", "b"]


def test_tag_mentioned_in_prose_is_not_a_header() -> None:
    found = parse_blocks("Use the [[POLI:MSG {...}]] tag to reply.\n[[/POLI:MSG]]")
    assert found.blocks == []
    assert found.rejections == []


# --- partial, malformed, invalid --------------------------------------------------------


def test_partial_block_then_completed() -> None:
    lines = PLAIN.splitlines()
    parser = BlockParser()
    assert parser.scan_screen(lines[:-1]) == []
    assert parser.pending is not None
    assert parser.pending.reason == "no closing tag yet"
    assert parser.rejections == []
    (block,) = parser.scan_screen(lines)
    assert block.id == "T1"
    assert parser.pending is None


def test_partial_header_then_completed() -> None:
    parser = BlockParser()
    assert parser.scan_screen(['[[POLI:MSG {"to":"EXECUTER","type":"pl']) == []
    assert parser.pending is not None
    assert parser.pending.reason == "header not finished yet"
    assert [b.id for b in parser.scan_screen(PLAIN)] == ["T1"]


def test_malformed_header_rejected_then_good_block_accepted() -> None:
    bad = '[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1",}]]\nbody\n[[/POLI:MSG]]'
    found = parse_blocks(f"{bad}\n\n{PLAIN}")
    assert [b.id for b in found.blocks] == ["T1"]
    (rejection,) = found.rejections
    assert rejection.line == 0
    assert rejection.reason.startswith("header is not valid JSON: Expecting property name")


class InvalidCase(t.NamedTuple):
    test_id: str
    header: str
    reason: str


INVALID_CASES = [
    InvalidCase("missing-id", '{"to":"EXECUTER","type":"plan"}', "header misses required key 'id'"),
    InvalidCase("missing-to", '{"type":"plan","id":"T1"}', "header misses required key 'to'"),
    InvalidCase("not-object", '["to","type"]', "header has no JSON object after POLI:MSG"),
    InvalidCase(
        "id-not-string",
        '{"to":"EXECUTER","type":"plan","id":1}',
        "header key 'id': 1 is not of type 'string'",
    ),
    InvalidCase(
        "placeholder-to",
        '{"to":"<TO>","type":"plan","id":"T1"}',
        "header key 'to': '<TO>' does not match '^[A-Za-z][A-Za-z0-9_.-]{0,63}$'",
    ),
    InvalidCase(
        "nonce-not-hex",
        '{"to":"E","type":"plan","id":"T1","nonce":"xyz!"}',
        "header key 'nonce': 'xyz!' does not match '^[0-9a-fA-F]{4,64}$'",
    ),
]


@pytest.mark.parametrize("case", INVALID_CASES, ids=[c.test_id for c in INVALID_CASES])
def test_invalid_header_rejected_with_reason(case: InvalidCase) -> None:
    found = parse_blocks(f"[[POLI:MSG {case.header}]]\nbody\n[[/POLI:MSG]]")
    assert found.blocks == []
    assert [r.reason for r in found.rejections] == [case.reason]


def test_parse_header_raises_block_rejected() -> None:
    with pytest.raises(BlockRejected, match="misses required key 'type'") as info:
        parse_header('[[POLI:MSG {"to":"E","id":"T1"}]]')
    assert isinstance(info.value, ProtocolError)
    assert isinstance(info.value, ValueError)


def test_new_header_before_close_rejects_the_open_one() -> None:
    text = '[[POLI:MSG {"to":"E","type":"plan","id":"T0"}]]\nunfinished\n' + PLAIN
    found = parse_blocks(text)
    assert [b.id for b in found.blocks] == ["T1"]
    assert [r.reason for r in found.rejections] == ["a new header began before the closing tag"]


def test_body_without_close_rejected_after_limit() -> None:
    parser = BlockParser(max_body_lines=3)
    parser.feed('[[POLI:MSG {"to":"E","type":"plan","id":"T1"}]]\na\nb\nc\nd\n')
    assert [r.reason for r in parser.rejections] == ["no closing tag within 3 lines"]


def test_rejections_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="politerm.protocol.parser"):
        parse_blocks('[[POLI:MSG {"to":"E","type":"plan"}]]\nx\n[[/POLI:MSG]]')
    assert "header misses required key 'id'" in caplog.text


# --- nonce and echo protection ----------------------------------------------------------

NONCE = "a1b2c3"
WITH_NONCE = render_block({**HEADER, "nonce": NONCE}, "go", inner_tag="PLAN")


class NonceCase(t.NamedTuple):
    test_id: str
    text: str
    expect: str | None
    ids: tuple[str, ...]
    reasons: tuple[str, ...]


NONCE_CASES = [
    NonceCase("no-check-plain", PLAIN, None, ("T1",), ()),
    NonceCase("no-check-with-nonce", WITH_NONCE, None, ("T1",), ()),
    NonceCase("right-nonce", WITH_NONCE, NONCE, ("T1",), ()),
    NonceCase("right-nonce-upper", WITH_NONCE.replace(NONCE, NONCE.upper()), NONCE, ("T1",), ()),
    NonceCase(
        "wrong-nonce",
        WITH_NONCE,
        "ffff00",
        (),
        ("nonce 'a1b2c3' is not this turn's nonce 'ffff00'",),
    ),
    NonceCase(
        "missing-nonce", PLAIN, NONCE, (), ("header has no nonce (this turn's nonce is 'a1b2c3')",)
    ),
]


@pytest.mark.parametrize("case", NONCE_CASES, ids=[c.test_id for c in NONCE_CASES])
def test_nonce(case: NonceCase) -> None:
    found = parse_blocks(case.text, nonce=case.expect)
    assert tuple(b.id for b in found.blocks) == case.ids
    assert tuple(r.reason for r in found.rejections) == case.reasons


def test_nonce_changes_per_turn() -> None:
    parser = BlockParser(nonce=NONCE)
    assert [b.nonce for b in parser.scan_screen(WITH_NONCE)] == [NONCE]
    parser.expect_nonce("0d0d0d")
    old_turn_again = WITH_NONCE.replace('"id":"T1"', '"id":"T5"')
    assert parser.scan_screen(old_turn_again) == []
    assert parser.rejections[-1].reason == "nonce 'a1b2c3' is not this turn's nonce '0d0d0d'"


def _echo(block: str, first: str, rest: str) -> str:
    lines = block.splitlines()
    return "\n".join([first + lines[0], *(rest + ln for ln in lines[1:])])


class EchoCase(t.NamedTuple):
    test_id: str
    screen: str


ECHO_CASES = [
    EchoCase("claude", _echo(WITH_NONCE, "❯ ", "  ") + "\n\n● I will do it."),
    EchoCase("claude-second-line", "❯ please reply with\n" + _echo(WITH_NONCE, "  ", "  ")),
    EchoCase("codex", _echo(WITH_NONCE, "› ", "  ") + "\n\n• Working"),
    EchoCase("gemini", "▄▄▄▄▄▄\n" + _echo(WITH_NONCE, " > ", "   ") + "\n▀▀▀▀▀▀\n✦ ok"),
    EchoCase("gemini-bars-only", "▄▄▄▄▄▄\n" + _echo(WITH_NONCE, "   ", "   ") + "\n▀▀▀▀▀▀"),
    EchoCase("opencode", "  ┃\n" + _echo(WITH_NONCE, "  ┃  ", "  ┃  ") + "\n  ┃\n     ok"),
    EchoCase("aider", _echo(WITH_NONCE, "> ", "> ") + "\n\nok"),
]


@pytest.mark.parametrize("case", ECHO_CASES, ids=[c.test_id for c in ECHO_CASES])
def test_block_in_echoed_prompt_is_not_counted(case: EchoCase) -> None:
    # Even with the right nonce: the echo is the prompt, not the reply.
    found = parse_blocks(case.screen, nonce=NONCE)
    assert found.blocks == []
    assert [r.reason for r in found.rejections] == ["block is inside an echoed prompt"]


def test_reply_after_echo_still_counts() -> None:
    screen = _echo(WITH_NONCE, "❯ ", "  ") + "\n\n● Done.\n\n" + textwrap.indent(WITH_NONCE, "  ")
    found = parse_blocks(screen, nonce=NONCE)
    assert [b.line for b in found.blocks] == [8]


LONG_SCREENS = [
    "aider-04-long.txt",
    "aider-raw-04-long.txt",
    "claude-04-long.txt",
    "codex-04-long.txt",
    "codex-inline-04-long.txt",
    "gemini-04-long.txt",
    "opencode-04-long.txt",
]


@pytest.mark.parametrize("name", LONG_SCREENS)
def test_start_after_last_prompt(name: str) -> None:
    lines = _screen(name).splitlines()
    start = last_prompt_line(lines, "line one of a pasted prompt\nplease give a long line reply")
    assert "line one of a pasted prompt" in lines[start]
    found = parse_blocks(lines, start=start + 1)
    assert [b.id for b in found.blocks] == ["T3"]
    assert all(b.line > start for b in found.blocks)


def test_last_prompt_line_without_prompt_skips_empty_input_box() -> None:
    lines = _screen("claude-04-long.txt").splitlines()
    assert lines[last_prompt_line(lines)].startswith("❯ line one")


# --- redraws, scrollback, streaming ---------------------------------------------------


def test_redraw_reported_once() -> None:
    screen = _screen("claude-02-tool-done.txt")
    parser = BlockParser()
    assert [b.id for b in parser.scan_screen(screen)] == ["T1", "T2"]
    assert parser.scan_screen(screen) == []
    assert [b.id for b in parser.blocks] == ["T1", "T2"]


def test_block_in_scrollback_and_screen_reported_once() -> None:
    history = _screen("codex-inline-99-history.txt")
    visible = _screen("codex-inline-04-long.txt")
    parser = BlockParser()
    first = parser.scan_screen(history + "\n" + visible)
    assert [b.id for b in first] == ["T1", "T2", "T3"]
    assert parser.scan_screen(visible) == []


def test_latest_prefers_last_well_formed_block() -> None:
    parser = BlockParser()
    parser.scan_screen(_screen("claude-99-history.txt"))
    latest = parser.latest()
    assert latest is not None
    assert latest.id == "T3"
    done = parser.latest(type="done")
    assert done is not None
    assert done.to == "ORCH"
    assert parser.latest(to="PLANNER") is None


STREAM_SAMPLE = (
    "noise line\r\n"
    + "\x1b[1m● \x1b[0m"
    + WITH_NONCE.replace("\n", "\r\n", 2)
    + "\n"
    + '[[POLI:MSG {"to":"E","type":"plan","id":"T8",}]]\n'
    + "  "
    + render_block({"to": "ORCH", "type": "done", "id": "T2", "nonce": NONCE}, "DONE")
    + "\ntrailing"
)


def _feed_all(chunks: t.Iterable[str]) -> tuple[list[str], list[str]]:
    parser = BlockParser(nonce=NONCE)
    got: list[str] = []
    for chunk in chunks:
        got.extend(b.dedupe_key for b in parser.feed(chunk))
    got.extend(b.dedupe_key for b in parser.flush())
    return got, [r.reason for r in parser.rejections]


def test_feed_split_at_every_offset() -> None:
    whole = _feed_all([STREAM_SAMPLE])
    assert len(whole[0]) == 2
    assert len(whole[1]) == 1
    for cut in range(len(STREAM_SAMPLE) + 1):
        assert _feed_all([STREAM_SAMPLE[:cut], STREAM_SAMPLE[cut:]]) == whole, cut


def test_feed_char_by_char() -> None:
    assert _feed_all(STREAM_SAMPLE) == _feed_all([STREAM_SAMPLE])


def test_feed_reports_block_before_final_newline() -> None:
    parser = BlockParser()
    assert parser.feed(PLAIN[:-3]) == []
    assert [b.id for b in parser.feed(PLAIN[-3:])] == ["T1"]
    assert parser.feed("\nnext line\n") == []


def test_feed_keeps_only_the_tail() -> None:
    parser = BlockParser()
    for _ in range(1000):
        parser.feed("lots of unrelated output on a line\n")
    parser.feed("partial")
    assert parser._tail == "partial"
    assert parser._stream.cand is None


def test_feed_real_screen_matches_scan() -> None:
    text = _screen("gemini-99-history.txt")
    parser = BlockParser()
    streamed = parser.feed(text) + parser.flush()
    assert [b.id for b in streamed] == [b.id for b in parse_blocks(text).blocks]


# --- wrapping -------------------------------------------------------------------------


def test_header_wrapped_at_80_columns() -> None:
    header = {
        "to": "EXECUTER",
        "type": "result",
        "id": "T42",
        "nonce": NONCE,
        "summary": "all seven steps ran; the flaky network test was retried twice and passed",
    }
    body = "1. " + "step text that is long enough to wrap as well " * 4
    block_text = render_block(header, body, inner_tag="RESULT")
    rendered: list[str] = []
    for i, line in enumerate(block_text.splitlines()):
        rendered += textwrap.wrap(
            line,
            width=80,
            initial_indent="● " if i == 0 else "  ",
            subsequent_indent="  ",
            break_on_hyphens=False,
        )
    assert len(rendered) > len(block_text.splitlines()) + 2
    (block,) = parse_blocks(rendered, nonce=NONCE).blocks
    assert block.header == header
    assert block.normalised_body == normalise_body(body)
    assert block.body_lines[0].startswith("1. step text")


def test_header_wrapped_inside_a_long_token() -> None:
    # A token wider than the screen is cut without a space: the no-space join is tried too.
    line = render_block({**HEADER, "blob": BLOB}, "x").splitlines()[0]
    cut = line.index(BLOB) + 40
    lines = ["  " + line[:cut], "  " + line[cut:], "  x", "  [[/POLI:MSG]]"]
    (block,) = parse_blocks(lines).blocks
    assert block.header["blob"] == BLOB


def test_wrapped_header_with_sidebar_junk() -> None:
    text = (
        '     [POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]        LSP\n'
        "     go\n"
        "     [/POLI:MSG]"
    )
    (block,) = parse_blocks(text).blocks
    assert block.body == "go"


# --- file-referenced bodies -------------------------------------------------------------


@pytest.fixture
def msgs(tmp_path: pathlib.Path) -> pathlib.Path:
    folder = tmp_path / "session" / "msgs"
    folder.mkdir(parents=True)
    (folder / "T1-plan.md").write_text("1. a long plan\n2. more\n", encoding="utf-8")
    (tmp_path / "session" / "secret.txt").write_text("secret", encoding="utf-8")
    return folder


def _file_block(ref: str, sha: str | None = None) -> Block:
    header: dict[str, t.Any] = {**HEADER, "file": ref}
    if sha is not None:
        header["sha256"] = sha
    (block,) = parse_blocks(render_block(header, "see file", inner_tag="PLAN")).blocks
    return block


SHA = hashlib.sha256(b"1. a long plan\n2. more\n").hexdigest()


@pytest.mark.parametrize("ref", ["msgs/T1-plan.md", "T1-plan.md", "./T1-plan.md"])
def test_file_body_resolved(msgs: pathlib.Path, ref: str) -> None:
    block = _file_block(ref, SHA)
    assert block.body == "see file"
    resolved = resolve_file_body(block, msgs)
    assert resolved.body == "1. a long plan\n2. more"
    assert resolved.file == ref


class FileCase(t.NamedTuple):
    test_id: str
    ref: str
    sha: str | None
    reason: str


FILE_CASES = [
    FileCase("traversal", "../secret.txt", None, "escapes the message folder"),
    FileCase("traversal-prefixed", "msgs/../../session/secret.txt", None, "escapes"),
    FileCase("absolute", "/etc/passwd", None, "absolute paths are not allowed"),
    FileCase("missing", "T9-plan.md", None, "not found in the message folder"),
    FileCase("directory", ".", None, "not a regular file"),
    FileCase("sha-mismatch", "T1-plan.md", "0" * 64, "does not match header"),
]


@pytest.mark.parametrize("case", FILE_CASES, ids=[c.test_id for c in FILE_CASES])
def test_file_body_rejected(msgs: pathlib.Path, case: FileCase) -> None:
    with pytest.raises(BlockRejected, match=case.reason):
        resolve_file_body(_file_block(case.ref, case.sha), msgs)


def test_file_body_symlink_escape(msgs: pathlib.Path) -> None:
    (msgs / "link.md").symlink_to(msgs.parent / "secret.txt")
    with pytest.raises(BlockRejected, match="escapes the message folder"):
        resolve_file_body(_file_block("link.md"), msgs)


def test_file_body_symlink_inside_is_fine(msgs: pathlib.Path) -> None:
    (msgs / "alias.md").symlink_to(msgs / "T1-plan.md")
    assert resolve_file_body(_file_block("alias.md", SHA), msgs).body.startswith("1. a long")


def test_parser_resolves_files_and_rejects_bad_ones(msgs: pathlib.Path) -> None:
    good = render_block({**HEADER, "file": "msgs/T1-plan.md", "sha256": SHA}, "see file")
    bad = render_block({**HEADER, "id": "T2", "file": "../secret.txt"}, "see file")
    parser = BlockParser(message_dir=msgs)
    blocks = parser.scan_screen(f"{good}\n{bad}")
    assert [b.body for b in blocks] == ["1. a long plan\n2. more"]
    assert [r.reason for r in parser.rejections] == [
        "file '../secret.txt': escapes the message folder"
    ]


def test_block_without_file_is_unchanged(msgs: pathlib.Path) -> None:
    (block,) = parse_blocks(PLAIN).blocks
    assert resolve_file_body(block, msgs) is block


# --- primers --------------------------------------------------------------------------


class PrimerCase(t.NamedTuple):
    test_id: str
    to: str
    type: str
    id: str
    nonce: str | None
    file_ref: str | None


PRIMER_CASES = [
    PrimerCase("plan-nonce", "EXECUTER", "plan", "T1", NONCE, None),
    PrimerCase("plan-file", "EXECUTER", "plan", "T1", NONCE, "msgs/T1-plan.md"),
    PrimerCase("final-no-nonce", "PLANNER", "final", "T7", None, None),
    PrimerCase("question", "ORCH", "question", "Q1", "00ff00", "msgs/Q1-question.md"),
]


def _primer_screens(text: str) -> list[tuple[str, str]]:
    return [
        ("bare", text),
        ("claude-echo", _echo(text, "❯ ", "  ")),
        ("rendered-reply", "● " + textwrap.indent(text, "  ")[2:]),
        ("aider-echo", _echo(text, "> ", "> ")),
    ]


@pytest.mark.parametrize("case", PRIMER_CASES, ids=[c.test_id for c in PRIMER_CASES])
def test_primer_never_parses_as_a_block(case: PrimerCase) -> None:
    text = render_primer(case.to, case.type, case.id, case.nonce, file_ref=case.file_ref)
    for value in (case.to, case.type, case.id, case.nonce or "", case.file_ref or ""):
        assert value in text
    for label, screen in _primer_screens(text):
        for expect in (case.nonce, None):
            found = parse_blocks(screen, nonce=expect, detect_echo=label != "bare")
            assert found.blocks == [], label
        parser = BlockParser(nonce=case.nonce, detect_echo=False)
        assert parser.feed(screen) + parser.flush() == [], label
    if case.nonce:
        assert f'"nonce":"{case.nonce}"' not in text


def test_primer_template_filled_in_parses() -> None:
    # The template is right: substituting the values gives a valid header.
    line = header_template().replace("<TO>", "EXECUTER").replace("<TYPE>", "plan")
    line = line.replace("<ID>", "T1").replace("<NONCE>", NONCE)
    assert parse_header(line, nonce=NONCE) == {**HEADER, "nonce": NONCE}


# --- values ---------------------------------------------------------------------------


def test_dedupe_key_ignores_rendering_but_not_identity() -> None:
    a = Block("EXECUTER", "plan", "T1", "1. do the thing\n\n2. check", nonce=NONCE)
    assert (
        a.dedupe_key
        == Block("EXECUTER", "plan", "T1", " 1 do the thing\n 2 check", nonce=NONCE).dedupe_key
    )
    for other in (
        Block("EXECUTER", "plan", "T1", a.body),
        Block("PLANNER", "plan", "T1", a.body, nonce=NONCE),
        Block("EXECUTER", "result", "T1", a.body, nonce=NONCE),
        Block("EXECUTER", "plan", "T1", "1. do another thing", nonce=NONCE),
    ):
        assert other.dedupe_key != a.dedupe_key


def test_block_is_hashable_and_renders() -> None:
    (block,) = parse_blocks(PLAIN).blocks
    assert hash(block) == hash(block)
    assert json.loads(block.render().splitlines()[0][11:-2]) == HEADER


def test_gemini_numbered_code_block() -> None:
    # Gemini CLI numbers the lines of code blocks by default; our primers ask for one.
    screen = [
        "✦ Here is the plan.",
        "",
        '     1 [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"abc123"}]]',
        "     2 <PLAN>",
        "     3 1. do the thing",
        "     4 2. check the thing",
        "     5",
        "     6 </PLAN>",
        "     7 [[/POLI:MSG]]",
        "",
        "  End of plan.",
    ]
    found = parse_blocks(screen, nonce="abc123")
    assert [(b.to, b.type, b.id) for b in found.blocks] == [("EXECUTER", "plan", "T1")]
    assert found.blocks[0].body_lines == ["1. do the thing", "2. check the thing"]
    # Numbers that are not a numbered code block stay text (aider's lists lose their dots).
    plain = parse_blocks(
        ['[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]', " 1 do it", "[[/POLI:MSG]]"]
    )
    assert plain.blocks[0].body_lines == ["1 do it"]
