"""A flood of output mid-turn: what reading the turn's window costs per look, as it grows.

An agent prints a long log in the middle of a turn (``cat`` of 1, 10 or 50 MB of log lines
into a real tmux pane, its history large enough to keep it all), then keeps working: a
status line redrawn every 0.1 s for 5 s, as a CLI's spinner does. The reader looks again
and again, as the router does on each ``%output``: the turn's window
(``BlockReader.lines``, a ``capture-pane`` of every row from the turn's start), its blocks
(``BlockReader.scan``), where the prompt's echo ends (``after_prompt``) and the blocks
without a nonce (``nonceless``). Two readers look at the same lines at the same moments:

- **full** (politerm before this session): every look parses the whole window three times;
- **memo**: each look parses only the lines after the last saved state whose lines are
  unchanged (``BlockParser``'s screen memo, ``AfterPrompt``, the turn's nonceless parser).

Reported per flood size and phase (``flood``: while ``cat`` runs; ``working``: the spinner
after it): looks, the parse CPU per look (p50, and the last look's: the largest window),
the phase's parse CPU, and the capture's wall time per look (tmux renders every row of the
window: that part still grows with it). While the flood runs, the history grows between
the look's snapshot and its capture, so the capture starts lower each time and its lines
do not repeat the last look's: the memo has nothing to go on from there. Both readers must
find the same block. ``python -m bench.bench_flood [--quick]`` (quick: 1 and 10 MB).
"""

from __future__ import annotations

import asyncio
import pathlib
import tempfile
import time

from bench._common import Bench, Row, Stats, check, cli, print_table, private_server, ratio
from politerm.agents.profile import load_profile
from politerm.driver.blocks import BlockReader, turn_start
from politerm.protocol.contract import AfterPrompt
from politerm.protocol.parser import BlockParser

NONCE = "5eed01"
PROMPT = "Run the build and report.\nTASK_ID=T1"
BLOCK = (
    f'[[POLI:MSG {{"to":"PLANNER","type":"result","id":"T1","nonce":"{NONCE}"}}]]\n'
    "<RESULT>\nbuilt\n</RESULT>\n[[/POLI:MSG]]\n"
)
DONE = "FLOOD-DONE"


def _flood_file(directory: pathlib.Path, megabytes: int) -> pathlib.Path:
    """Log lines (about 110 bytes each), a block in the middle, a marker at the end."""
    path = directory / f"flood-{megabytes}.log"
    line = "2026-11-28 12:00:00 INFO build.step[{i}] compiled module {i} in 0.{i}s ok\n"
    count = megabytes * 1024 * 1024 // len(line.format(i=100000))
    with path.open("w") as out:
        out.write(f"> {PROMPT.splitlines()[-1]}\n")
        for i in range(count):
            out.write(line.format(i=i))
            if i == count // 2:
                out.write(BLOCK)
    return path


def _full_look(reader: BlockReader, lines: list[str]) -> int:
    reader.parser._memo = None  # the cost before the memo, for the baseline
    reader.scan(lines, NONCE)
    after = AfterPrompt()(lines, PROMPT)
    BlockParser(nonce=None, detect_echo=True).scan_screen(lines[after:])
    return len(reader.screen_blocks)


def _memo_look(reader: BlockReader, lines: list[str]) -> int:
    reader.scan(lines, NONCE)
    after = reader.after_prompt(lines, PROMPT)
    reader.nonceless(lines[after:], "T1")
    return len(reader.screen_blocks)


async def bench_flood(bench: Bench, megabytes: int, scratch: pathlib.Path) -> list[Row]:
    path = _flood_file(scratch, megabytes)
    script = (
        'read go; cat "$0"; i=0; while [ $i -lt 50 ]; do printf "\\r* Working %d" $i; '
        f"sleep 0.1; i=$((i+1)); done; echo; echo {DONE}; sleep 600"
    )
    pane = await bench.window(f"flood{megabytes}", ["sh", "-c", script, str(path)])
    profile = load_profile("generic")
    start = turn_start(await pane.snapshot())
    readers = {name: BlockReader(name.upper(), profile, pane) for name in ("full", "memo")}
    looks = {"full": _full_look, "memo": _memo_look}
    phases: dict[str, dict[str, list[float]]] = {}
    await pane.send_keys("Enter")  # go
    lines: list[str] = []
    while not any(DONE in ln for ln in lines[-3:]):
        snap = await pane.snapshot()
        t0 = time.perf_counter()
        lines = await readers["memo"].lines(snap, start)
        phase = "working" if any("* Working" in ln for ln in lines[-3:]) else "flood"
        cost = phases.setdefault(phase, {"full": [], "memo": [], "capture": []})
        cost["capture"].append((time.perf_counter() - t0) * 1000)
        for name, reader in readers.items():
            c0 = time.process_time()
            looks[name](reader, lines)
            cost[name].append((time.process_time() - c0) * 1000)
    found = {name: len(r.screen_blocks) for name, r in readers.items()}
    check(found == {"full": 1, "memo": 1}, f"both readers find the block: {found}")
    rows: list[Row] = []
    for phase, cost in phases.items():
        base, ours = Stats.of(cost["full"]), Stats.of(cost["memo"])
        rows.append(
            {
                "MB": megabytes,
                "phase": phase,
                "window lines": len(lines),
                "looks": len(cost["capture"]),
                "full p50 ms": base.p50,
                "memo p50 ms": ours.p50,
                "full last ms": cost["full"][-1],
                "memo last ms": cost["memo"][-1],
                "full CPU s": sum(cost["full"]) / 1000,
                "memo CPU s": sum(cost["memo"]) / 1000,
                "x CPU": ratio(sum(cost["full"]), sum(cost["memo"])),
                "capture p50 ms": Stats.of(cost["capture"]).p50,
            }
        )
    return rows


async def run(quick: bool = False) -> dict[str, list[Row]]:
    sizes = (1, 10) if quick else (1, 10, 50)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="poli-flood-") as tmp:
        # 50 MB is about 480,000 rows: more than the default history keeps.
        async with private_server("flood", history_limit=1_000_000) as bench:
            for mb in sizes:
                rows += await bench_flood(bench, mb, pathlib.Path(tmp))
    return {"flood": print_table("a flood of output mid-turn: reading the window", rows)}


def main(quick: bool = False) -> dict[str, list[Row]]:
    """Run the flood benchmark and print its table; return it."""
    return asyncio.run(run(quick))


if __name__ == "__main__":
    cli(main)
