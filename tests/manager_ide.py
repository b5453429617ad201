"""Plays an IDE agent (Cursor) on the manager's file channel, for the tests.

``python tests/manager_ide.py ROOT [--quiet] [--skip N] [--delay S] [--lifetime S]``: each
time ``ROOT/dev_instructions/next_step.txt`` holds a new step, write
``ROOT/dev_logs/cursor_step_output.txt`` = ``Report for step N: <first instruction line>``, in
two parts (so a half-written report is on disk for a moment), ending with END_OF_REPORT
(``--quiet``: without it, the manager must wait for the file to be quiet). ``--skip N`` never
answers step N; ``--delay`` waits before answering; ``--pad N`` adds N characters of details.
Exits after ``--lifetime`` seconds.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import threading
import time

import watchfiles

STEP_RE = re.compile(r"^# Step (\d+)(?: of task (\S+))?\n\n(.*?)\n", re.DOTALL)


def answer(root: pathlib.Path, step: int, first: str, quiet: bool, delay: float, pad: int) -> None:
    time.sleep(delay)
    out = root / "dev_logs" / "cursor_step_output.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        fh.write(f"Report for step {step}: ")
        fh.flush()
        time.sleep(0.3)
        details = f"Details: {'x' * pad}\n" if pad else ""
        fh.write(f"{first}\nAll good.\n{details}" + ("" if quiet else "END_OF_REPORT\n"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=pathlib.Path)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--skip", type=int, action="append", default=[])
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--lifetime", type=float, default=120.0)
    ap.add_argument("--pad", type=int, default=0)
    args = ap.parse_args()
    inbox = args.root / "dev_instructions"
    inbox.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    timer = threading.Timer(args.lifetime, stop.set)
    timer.daemon = True
    timer.start()
    done: set[tuple[str, int]] = set()
    print("ide ready", flush=True)
    for _ in watchfiles.watch(inbox, stop_event=stop, rust_timeout=500, yield_on_timeout=True):
        try:
            m = STEP_RE.match((inbox / "next_step.txt").read_text(encoding="utf-8"))
        except OSError:
            continue
        if m is None:
            continue
        step, key = int(m.group(1)), (m.group(2) or "", int(m.group(1)))
        if key in done or step in args.skip:
            continue
        done.add(key)
        answer(args.root, step, m.group(3).strip(), args.quiet, args.delay, args.pad)
    stop.set()


if __name__ == "__main__":
    main()
