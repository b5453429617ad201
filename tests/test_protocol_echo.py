"""The POLI:MSG contract: the turn's nonce, blocks inside an echoed prompt, and primers that
must never parse as a block."""

from __future__ import annotations

import textwrap
import typing as t

import pytest

from politerm.protocol import (
    BlockParser,
    header_template,
    last_prompt_line,
    parse_blocks,
    parse_header,
    render_primer,
)
from tests.protocol_helpers import HEADER, NONCE, PLAIN, WITH_NONCE, _echo, _screen

# --- nonce and echo protection ----------------------------------------------------------


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
        ("an old block, ignored as it should be (its nonce 'a1b2c3' is not this turn's 'ffff00')",),
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
    assert parser.rejections[-1].reason == (
        "an old block, ignored as it should be (its nonce 'a1b2c3' is not this turn's '0d0d0d')"
    )
    assert parser.rejections[-1].old


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
