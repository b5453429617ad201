"""A screen scan that goes on from where the lines agree finds what a full scan finds.

:meth:`BlockParser.scan_screen` keeps the machine's state every few hundred lines and, on
the next scan of a window whose first lines are the same, goes on from the last state
before the first changed line. These tests scan windows as an agent's turn grows them
(appended output, redrawn lines, a floods of log lines, blocks split by a scan, echoed
prompts, Gemini's numbered code lines, file blocks whose file appears later, a new nonce)
with one parser that remembers and one that is made to scan everything each time, and
compare everything they report: new blocks, rejections, the open candidate.
"""

from __future__ import annotations

import random
import typing as t

import pytest

from politerm.protocol.contract import AfterPrompt, after_prompt, nonceless
from politerm.protocol.parser import _MARK_EVERY, BlockParser

if t.TYPE_CHECKING:
    import pathlib

NONCES = ("a1b2c3", "d4e5f6")


def _block(rng: random.Random, nonce: str, n: int) -> list[str]:
    kind = rng.choice(["plain", "wrapped", "numbered", "open", "wrong-nonce", "file", "one"])
    tag = f',"nonce":"{nonce}"' if nonce else ""  # "": blocks that dropped the nonce
    header = f'[[POLI:MSG {{"to":"EXECUTER","type":"plan","id":"T{n}"{tag}}}]]'
    if kind == "wrong-nonce":
        header = header.replace(nonce, "ffffff")
    if kind == "one":
        return [f"● {header[:-2]}]] done [[/POLI:MSG]]"]
    if kind == "file":
        named = header.replace(f'"id":"T{n}"', f'"id":"F{n}"')
        head = named[:-3] + f',"file":"body-{n % 3}.md"}}]]'
        return [f"  {head}", "  [[/POLI:MSG]]"]
    if kind == "numbered":
        code = [header, "<PLAN>", f"1. step {n}", "</PLAN>", "[[/POLI:MSG]]"]
        return [f"  {i + 1:>2} {text}" for i, text in enumerate(code)]
    if kind == "wrapped":
        return [f"  {header[:40]}", f"  {header[40:]}", *_body("  1. go")]
    body = [f"  {header}", "  <PLAN>", f"  1. step {n}", "  </PLAN>"]
    return body if kind == "open" else [*body, "  [[/POLI:MSG]]"]


def _body(step: str) -> list[str]:
    return ["  <PLAN>", step, "  </PLAN>", "  [[/POLI:MSG]]"]


def _noise(rng: random.Random, n: int) -> list[str]:
    kind = rng.choice(["log", "log", "log", "echo", "blank", "bar"])
    if kind == "echo":
        return [f"❯ user prompt {n}", "  continued"]
    if kind == "blank":
        return [""]
    if kind == "bar":
        return ["▄" * 20, f" > typed {n}", "▀" * 20]
    return [f"2026-11-28 12:00:{n % 60:02d} INFO item {rng.randrange(10**6)} ok"]


def _grow(rng: random.Random, lines: list[str], nonce: str, step: int) -> list[str]:
    """The next window: output appended, and now and then a line redrawn or a screen cut."""
    out = list(lines)
    roll = rng.random()
    if roll < 0.1 and out:
        out[rng.randrange(len(out))] = f"redrawn {step}"
    elif roll < 0.15 and out:
        del out[rng.randrange(len(out)) :]
    for _ in range(rng.randrange(1, 200)):
        out += _block(rng, nonce, step) if rng.random() < 0.05 else _noise(rng, step)
    return out


def _report(p: BlockParser, new: list[t.Any]) -> tuple[t.Any, ...]:
    return (
        [(b.id, b.line, b.body) for b in new],
        list(p.rejections),
        p.pending,
    )


@pytest.mark.parametrize("seed", range(6))
def test_a_remembering_scan_reports_what_a_full_scan_reports(
    seed: int, tmp_path: pathlib.Path
) -> None:
    rng = random.Random(seed)
    memo = BlockParser(detect_echo=True, message_dir=tmp_path)
    full = BlockParser(detect_echo=True, message_dir=tmp_path)
    lines: list[str] = []
    nonce = NONCES[0]
    resumed = 0
    for step in range(30):
        if step == 20:  # a new turn's nonce: nothing remembered under the old one counts
            nonce = NONCES[1]
        if step == 10:  # a file block's file appears only now
            for k in range(3):
                (tmp_path / f"body-{k}.md").write_text(f"body {k}\n")
        memo.expect_nonce(nonce)
        full.expect_nonce(nonce)
        lines = _grow(rng, lines, nonce, step)
        full._memo = None  # made to scan every line, as before the memo
        got = _report(memo, memo.scan_screen(lines))
        want = _report(full, full.scan_screen(lines))
        assert got == want, f"seed {seed} step {step}"
        resumed += memo._memo is not None and bool(memo._memo.marks)
    assert resumed, "the memo never had a saved state to go on from"


def test_a_flood_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each scan of a growing window parses the lines after the last saved state only."""
    pushed: list[int] = []
    from politerm.protocol import parser as mod

    real = mod._Machine.push

    def counting(self: t.Any, raw: str, index: int) -> list[t.Any]:
        pushed.append(index)
        return real(self, raw, index)

    monkeypatch.setattr(mod._Machine, "push", counting)
    p = BlockParser(detect_echo=True)
    window: list[str] = []
    for chunk in range(50):
        window += [f"log line {chunk}.{i}" for i in range(1000)]
        p.scan_screen(window)
    # 50,000 lines, scanned 50 times: a full scan each time would push 1,275,000 lines.
    assert len(pushed) < len(window) + 50 * _MARK_EVERY, len(pushed)


@pytest.mark.parametrize("seed", range(4))
def test_after_prompt_and_nonceless_over_a_growing_window_match_a_full_look(seed: int) -> None:
    rng = random.Random(seed)
    find = AfterPrompt()
    unnonced = BlockParser(nonce=None, detect_echo=True)
    seen: set[str] = set()
    lines: list[str] = []
    for step in range(30):
        lines = _grow(rng, lines, "", step)
        if step % 7 == 3:  # the turn's prompt echoed again, further down
            lines += ["❯ user prompt 3"]
        prompt = "user prompt 3" if step % 11 else "user prompt 4"
        assert find(lines, prompt) == after_prompt(lines, prompt), f"seed {seed} step {step}"
        seen |= {b.dedupe_key for b in nonceless(lines, f"T{step}", unnonced)}
        seen |= {b.dedupe_key for b in nonceless(lines, f"T{step - 1}", unnonced)}
    fresh = {b.dedupe_key for s in range(30) for b in nonceless(lines, f"T{s}")}
    assert len(fresh) > 3, "too few blocks without a nonce to compare"
    remembered = {b.dedupe_key for s in range(30) for b in nonceless(lines, f"T{s}", unnonced)}
    assert not remembered, "a block was reported twice"
    assert fresh <= seen | remembered
