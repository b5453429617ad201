"""Gemini CLI's default code-block line numbers, with lines the CLI wrapped itself.

The fixtures ``gemini-numbered-*.txt`` are real Gemini CLI 0.61.0 screens (default
settings, 200 columns) of a reply holding the block inside a code block.
"""

from __future__ import annotations

import pathlib
import typing as t

import pytest

from politerm.protocol import BlockParser, parse_blocks

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
LONG_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu one two "
    "three four five six seven"
)


def _screen(name: str) -> str:
    return (SCREENS / name).read_text()


def test_real_screen_with_a_wrapped_body_line() -> None:
    text = _screen("gemini-numbered-01-wrap.txt")
    # The screen really is numbered and wrapped: "   3 1. do …" continues unnumbered.
    assert "   6 [[/POLI:MSG]]" in text
    assert "\n     four five six seven\n" in text
    found = parse_blocks(text)
    assert found.rejections == []
    (block,) = found.blocks
    assert (block.to, block.type, block.id) == ("EXECUTER", "plan", "T1")
    # The wrapped line is put back together, and no line number is left in the body.
    assert block.body_lines == [f"1. do the thing {LONG_WORDS}", "2. check the thing"]


def test_real_screen_with_a_wrapped_header_and_two_digit_numbers() -> None:
    found = parse_blocks(_screen("gemini-numbered-02-long.txt"))
    assert found.rejections == []
    (block,) = found.blocks
    assert block.id == "T2"
    assert block.header["note"] == f"a long header that wraps: {LONG_WORDS} {LONG_WORDS}"
    lines = block.body_lines
    assert lines[:11] == [f"{n}. step {n}" for n in range(1, 12)]
    # Line 14 of the code block wrapped over three screen lines.
    assert lines[11:] == [f"12. the last step {LONG_WORDS} {LONG_WORDS}"]


def test_feeding_the_real_screen_in_chunks_gives_the_same_block() -> None:
    text = _screen("gemini-numbered-02-long.txt")
    want = parse_blocks(text).blocks[0]
    parser = BlockParser()
    got = []
    for i in range(0, len(text), 37):
        got.extend(parser.feed(text[i : i + 37]))
    got.extend(parser.flush())
    assert [b.body for b in got] == [want.body]
    assert parser.rejections == []


class Case(t.NamedTuple):
    test_id: str
    lines: list[str]
    body: list[str] | None  # None: no block, and the candidate is left open


HEAD = '   1 [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]'
CASES = [
    Case(
        "wrap-then-numbers-continue",
        [
            HEAD,
            "   2 <PLAN>",
            "   3 1. first part",
            "     second part",
            "   4 </PLAN>",
            "   5 [[/POLI:MSG]]",
        ],
        ["1. first part second part"],
    ),
    Case(
        "continuation-starting-with-a-number-is-text",
        [HEAD, "   2 buy", "     12 apples", "   3 [[/POLI:MSG]]"],
        ["buy 12 apples"],
    ),
    Case(
        "bare-number-is-a-blank-code-line",
        [HEAD, "   2 one", "   3", "   4 two", "   5 [[/POLI:MSG]]"],
        ["one", "two"],
    ),
    Case(
        "closing-tag-keeps-its-number-after-the-sequence-broke",
        [HEAD, "   2 one", "   9 two", "   3 [[/POLI:MSG]]"],
        ["one", "9 two"],
    ),
    Case(
        "numbers-outside-a-numbered-block-stay-text",
        ['[[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]', " 1 do it", "[[/POLI:MSG]]"],
        ["1 do it"],
    ),
    Case(
        "unclosed-numbered-block-is-left-open",
        [HEAD, "   2 one", "     wrapped", "", "  End of plan."],
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_numbered_blocks(case: Case) -> None:
    parser = BlockParser()
    blocks = parser.scan_screen(["✦ Here is the plan.", "", *case.lines])
    if case.body is None:
        assert blocks == []
        assert parser.pending is not None and parser.pending.reason == "no closing tag yet"
    else:
        assert [b.body_lines for b in blocks] == [case.body]
        assert parser.pending is None
    assert parser.rejections == []
