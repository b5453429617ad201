"""The POLI:MSG contract on a live screen: redraws and scrollback reported once, streamed
feeds split anywhere, and headers wrapped by the terminal."""

from __future__ import annotations

import textwrap
import typing as t

from politerm.protocol import BlockParser, normalise_body, parse_blocks, render_block
from tests.protocol_helpers import BLOB, HEADER, NONCE, PLAIN, WITH_NONCE, _screen

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
