"""The POLI:MSG contract: parsing real rendered screens and every quirk realcli.md lists.

Here: the recorded screens, the block formats, and blocks as values. Elsewhere:
test_protocol_invalid.py (partial, malformed, invalid), test_protocol_echo.py (nonces,
echoed prompts, primers), test_protocol_stream.py (redraws, streaming, wrapping),
test_protocol_files.py (file-referenced bodies)."""

from __future__ import annotations

import json
import textwrap
import typing as t

import pytest

from politerm.protocol import Block, MessageType, parse_blocks, render_block
from tests.protocol_helpers import BLOB, HEADER, NONCE, PLAIN, SCREENS, _screen

LONG_STEP = (
    "a step whose text is also very long: lorem ipsum dolor sit amet consectetur adipiscing "
    "elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim "
    "veniam quis nostrud"
)
LONG_NOTE = (
    "this header is deliberately long so that it must wrap across the terminal width of two "
    "hundred columns: alpha bravo charlie delta echo foxtrot golf hotel"
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
T7 = Expected("EXECUTER", "plan", "T7", ("1. do the thing", "2. check the thing"))
T7_HALF = Expected("EXECUTER", "plan", "T7", ("1.", "2. check the thing"))
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
    ScreenCase("opencode-plan-drawn", "opencode-plan-drawn.txt", (T7,)),
    # Caught mid-repaint: closed but half drawn (test_protocol_settle.py).
    ScreenCase("opencode-plan-half-drawn", "opencode-plan-half-drawn.txt", (T7_HALF,)),
]


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
