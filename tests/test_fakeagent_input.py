"""The scripted fake agent's input, in real tmux panes: pastes logged exactly, hostile text
never run, swallowed Enters, and the key decoder."""

from __future__ import annotations

import hashlib
import pathlib
import typing as t

import pytest

from politerm.testing.fakeagent import prompts
from politerm.testing.fakeagent.keys import KeyDecoder
from politerm.testing.retry import retry_until
from tests.fakeagent_helpers import (
    FakePane,
    workdir_fixture,  # noqa: F401  # a fixture: pytest finds it here by its name
    write_scenario,
)

if t.TYPE_CHECKING:
    from libtmux.server import Server


def test_multiline_paste_logged_exact_and_echoed(server: Server, workdir: pathlib.Path) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    data = b"line one\nline two\n  indented\there\n\xff raw byte"
    agent.paste(data)
    agent.wait_screen("line two")
    agent.keys("Enter")
    agent.wait_event("prompt")
    screen = agent.wait_screen("● ECHO: line one")
    lines = [line.rstrip() for line in screen.split("\n")]
    at = lines.index("❯ line one")
    assert lines[at + 1 : at + 3] == ["  line two", "    indented  here"]
    assert prompts(agent.log) == [data]
    (record,) = agent.events("prompt")
    assert record["len"] == len(data)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["n"] == 1


def test_one_mib_paste_arrives_exact(server: Server, workdir: pathlib.Path) -> None:
    # How fast: bench/bench_paste.py (tests assert no timings).
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    line = b"0123456789 abcdefghijklmnopqrstuvwxyz \xc3\xa9\xe2\x9c\x93 ~!@#$%^&*()\n"
    data = (line * (1024 * 1024 // len(line) + 1))[: 1024 * 1024]
    agent.paste(data)
    agent.wait_event("paste", 60)
    lines = data.count(b"\n")
    agent.wait_screen(f"[Pasted text #1 +{lines} lines]")
    agent.keys("Enter")
    (record,) = agent.wait_event("prompt", 10)
    assert record["len"] == len(data)
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert prompts(agent.log) == [data]
    agent.wait_screen("● ECHO: 0123456789")


def test_hostile_text_is_logged_verbatim_and_never_run(
    server: Server, workdir: pathlib.Path
) -> None:
    agent = FakePane(server, workdir, "claude")
    agent.wait_ready()
    canary = workdir / "canary"
    data = (
        b"C-c Enter $(touch canary) `touch canary`; touch canary && rm -rf ~ |\n"
        b"\x03 \x04 \r \x1b \x1b[2J\x1b[H\x1b]0;pwned\x07 \x1b[201 done"
    )
    agent.paste(data)
    agent.wait_screen("touch canary")
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.type("$(touch canary) `touch canary`; touch canary")
    agent.wait_screen("❯\u00a0$(touch")
    agent.keys("Enter")
    agent.wait_event("prompt", count=2)
    screen = agent.wait_screen("● ECHO: $(touch canary)")
    assert prompts(agent.log) == [data, b"$(touch canary) `touch canary`; touch canary"]
    assert not canary.exists()
    # The pasted ESC [2J was shown as text, not obeyed: the banner is still there.
    assert "Claude Code" in screen
    assert "^[[2J" in agent.screen(history=True)
    assert agent.dead_status() is None


def test_swallow_first_enter_after_paste(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_first_enter_after_paste = true\n")
    agent = FakePane(server, workdir, "gemini", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"first line\nsecond line")
    agent.wait_screen(" > first line")
    agent.keys("Enter")
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "after_paste"
    assert agent.events("prompt") == []
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.wait_screen("✦ ECHO: first line")
    assert prompts(agent.log) == [b"first line\nsecond line"]


def test_swallow_enter_in_burst(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_enter_in_burst = true\n")
    agent = FakePane(server, workdir, "codex", scenario=scenario)
    agent.wait_ready()
    agent.keys("burst", "Enter")  # one send-keys: text and Enter reach it in one read()
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "burst"
    agent.wait_screen("› burst")
    assert agent.events("prompt") == []
    agent.keys("Enter")
    agent.wait_event("prompt")
    agent.wait_screen("• ECHO: burst")
    # A paste followed at once by Enter is not a burst of typing.
    agent.paste(b"pasted")
    agent.keys("Enter")
    agent.wait_event("prompt", count=2)
    assert prompts(agent.log) == [b"burst", b"pasted"]


def test_swallow_enter_in_burst_window_covers_a_paste(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_enter_in_burst = true\nburst_window = 0.5\n")
    agent = FakePane(server, workdir, "codex", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"pasted")
    agent.keys("Enter")
    (swallowed,) = agent.wait_event("swallowed_enter")
    assert swallowed["reason"] == "burst"
    assert agent.events("prompt") == []

    def enter_until_submitted() -> bool:
        agent.keys("Enter")
        return bool(agent.events("prompt"))

    # Once the window has passed, Enter submits again.
    retry_until(enter_until_submitted, 60, interval=0.2, what="an Enter after the burst window")
    assert prompts(agent.log) == [b"pasted"]


def test_swallow_all_enters_keeps_the_input_stuck(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = write_scenario(tmp_path, "swallow_all_enters = true\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"stuck forever")
    agent.wait_screen("❯\u00a0stuck forever")
    for count in (1, 2, 3):
        agent.keys("Enter")
        agent.wait_event("swallowed_enter", count=count)
    agent.type("!")
    agent.keys("Enter")
    swallowed = agent.wait_event("swallowed_enter", count=4)
    assert {e["reason"] for e in swallowed} == {"all"}
    assert agent.events("prompt") == []
    assert "❯\u00a0stuck forever!" in agent.wait_screen("stuck forever!")
    assert agent.dead_status() is None


class DecodeCase(t.NamedTuple):
    test_id: str
    data: bytes
    expected: list[tuple[str, bytes, str]]


DECODE_CASES = [
    DecodeCase("typed-enter", b"ab\r", [("text", b"ab", ""), ("key", b"", "enter")]),
    DecodeCase("lf-is-enter", b"\n", [("key", b"", "enter")]),
    DecodeCase(
        "paste-keeps-everything",
        b"\x1b[200~a\x1b[A\x03\r\n\x1b[200~b\x1b[201~\x7f",
        [("paste", b"a\x1b[A\x03\r\n\x1b[200~b", ""), ("key", b"", "backspace")],
    ),
    DecodeCase("arrows", b"\x1b[A\x1bOB", [("key", b"", "up"), ("key", b"", "down")]),
    DecodeCase("esc-then-ctrl-c", b"\x1b\x03", [("key", b"", "esc"), ("key", b"", "ctrl-c")]),
    DecodeCase("utf8-text", "é✓".encode(), [("text", "é✓".encode(), "")]),
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=[c.test_id for c in DECODE_CASES])
@pytest.mark.parametrize("chunk", [1, 3, 1 << 16], ids=["bytewise", "by-3", "whole"])
def test_key_decoder(case: DecodeCase, chunk: int) -> None:
    decoder = KeyDecoder()
    events = []
    for i in range(0, len(case.data), chunk):
        events += decoder.feed(case.data[i : i + chunk])
    events += decoder.flush()
    got = [(e.kind.value, e.data, e.key) for e in events]
    if chunk < len(case.data) and case.test_id in ("typed-enter", "utf8-text"):
        # Typed text may arrive in pieces; joined it must be the same.
        text = b"".join(e[1] for e in got if e[0] == "text")
        got = [("text", text, "")] + [e for e in got if e[0] != "text"]
    assert got == case.expected


def test_key_decoder_reassembles_a_one_mib_paste_fed_in_chunks() -> None:
    data = b"\x1b[200~" + bytes(range(256)).replace(b"\x1b", b"") * 4200 + b"\x1b[201~"
    decoder = KeyDecoder()
    events = []
    for i in range(0, len(data), 4095):
        events += decoder.feed(data[i : i + 4095])
    (paste,) = events
    assert paste.data == data[6:-6]
