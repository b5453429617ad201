"""A screen block counts only once two scans in a row saw it the same (``settle``).

opencode repaints its reply in place. Under load, CI captured it between two writes of a
repaint: the block was closed (``</PLAN>``, ``[[/POLI:MSG]]``, even the turn's footer drawn)
but the first list item read ``1.`` without its text, and that half-drawn block was taken
as the answer (``test_prompt_block_and_tool_call[opencode]``: body ``'1.\\n2. check the
thing'``). The two recorded screens are that capture and the finished one.
"""

from __future__ import annotations

import pathlib
import typing as t

from politerm.agents.profile import load_profile
from politerm.driver.blocks import BlockReader
from politerm.protocol.parser import _MARK_EVERY, BlockParser

if t.TYPE_CHECKING:
    from politerm.terminal import Terminal

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
HALF = (SCREENS / "opencode-plan-half-drawn.txt").read_text().splitlines()
DRAWN = (SCREENS / "opencode-plan-drawn.txt").read_text().splitlines()


def test_the_recorded_half_drawn_screen_is_a_closed_block_that_lost_its_first_item() -> None:
    # What made the bug: read alone, the half-drawn screen is a well-formed block.
    [block] = BlockParser().scan_screen(HALF)
    assert block.body == "1.\n2. check the thing"


def test_a_half_drawn_block_is_never_reported() -> None:
    p = BlockParser(settle=True)
    assert p.scan_screen(HALF) == []
    assert p.scan_screen(DRAWN) == []  # differs from the last scan: one more look
    [block] = p.scan_screen(DRAWN)
    assert block.body == "1. do the thing\n2. check the thing"
    assert p.scan_screen(DRAWN) == []  # reported once
    assert [b.body for b in p.blocks] == [block.body]


def test_a_block_drawn_still_is_reported_on_the_second_look() -> None:
    p = BlockParser(settle=True)
    assert p.scan_screen(DRAWN) == []
    assert [b.id for b in p.scan_screen(DRAWN)] == ["T7"]


def test_a_held_block_above_a_remembered_state_is_reported_when_the_lines_agree() -> None:
    # The second scan goes on from a saved state below the block (the lines above agree),
    # so it does not parse the block again: agreeing lines are the second look.
    filler = [f"log line {i}" for i in range(_MARK_EVERY * 2)]
    p = BlockParser(settle=True)
    assert p.scan_screen(DRAWN + filler) == []
    [block] = p.scan_screen([*DRAWN, *filler, "more output"])
    assert block.body == "1. do the thing\n2. check the thing"
    assert p.scan_screen([*DRAWN, *filler, "more output", "and more"]) == []


def test_the_driver_reads_screens_with_settle() -> None:
    reader = BlockReader(
        "AGENT",
        load_profile("opencode"),
        t.cast("Terminal", None),  # scan() reads the lines it is given, never the terminal
    )
    assert reader.scan(HALF, None) == ([], [])
    assert reader.scan(DRAWN, None) == ([], [])
    blocks, _ = reader.scan(DRAWN, None)
    assert [b.body for b in blocks] == ["1. do the thing\n2. check the thing"]


def test_a_block_held_back_is_listed_as_unsettled_until_reported() -> None:
    # The router's last look before a stop keeps looking while one is (router.py).
    p = BlockParser(settle=True)
    p.scan_screen(DRAWN)
    assert [b.id for b in p.unsettled] == ["T7"]
    p.scan_screen(DRAWN)
    assert p.unsettled == []
    assert BlockParser().unsettled == []
