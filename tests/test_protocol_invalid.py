"""The POLI:MSG contract: partial blocks, malformed and invalid headers, and their rejections."""

from __future__ import annotations

import logging
import typing as t

import pytest

from politerm.errors import BlockRejected, ProtocolError
from politerm.protocol import BlockParser, parse_blocks, parse_header
from politerm.protocol.header import validate_header
from tests.protocol_helpers import PLAIN

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


@pytest.mark.parametrize("order", ["good-first", "bad-first"])
def test_a_header_checked_again_gets_the_same_verdict_by_value_and_type(order: str) -> None:
    # The schema check of a flat header is remembered: 1 and True (equal in Python) must
    # not share a verdict, nor a header and the same header with a wrong-typed value.
    good: dict[str, t.Any] = {"to": "EXECUTER", "type": "plan", "id": "T1"}
    cases: list[tuple[dict[str, t.Any], str | None]] = [
        (good, None),
        ({**good, "id": 1}, "header key 'id'"),
        ({**good, "to": True}, "'to'"),
    ]
    if order == "bad-first":
        cases.reverse()
    for _ in range(2):
        for header, reason in cases:
            if reason is None:
                validate_header(header)
                continue
            with pytest.raises(BlockRejected, match=reason):
                validate_header(header)
    nested = {**good, "extra": {"deep": [1]}}  # not flat: checked each time, same verdict
    validate_header(nested)
    validate_header(nested)
