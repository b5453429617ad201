"""Command line of the fake agent: ``python -m politerm.testing.fakeagent``."""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import sys
import typing as t

from politerm.testing.fakeagent.app import FakeAgent
from politerm.testing.fakeagent.eventlog import EventLog
from politerm.testing.fakeagent.scenario import (
    Mode,
    Scenario,
    ScenarioError,
    bundled_scenario,
    load_scenario,
)
from politerm.testing.fakeagent.transcript import Transcript


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m politerm.testing.fakeagent",
        description="A scripted fake agent TUI imitating claude, codex or gemini.",
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode])
    parser.add_argument(
        "--scenario", help="scenario file (TOML or JSON), or the name of a bundled one"
    )
    parser.add_argument("--log", help="JSONL event log (created 0600)")
    parser.add_argument("--name", default="", help="name shown in the title and logged")
    parser.add_argument(
        "--transcript", help="Claude-Code-style JSONL session transcript (created 0600)"
    )
    parser.add_argument(
        "--no-alt-screen", action="store_true", help="codex: draw inline, history in scrollback"
    )
    parser.add_argument(
        "--print", metavar="PROMPT", help="answer PROMPT as one turn, then exit (a CLI's -p)"
    )
    return parser


def _resolve_scenario(value: str | None) -> Scenario:
    if value is None:
        return Scenario()
    path = pathlib.Path(value)
    if not path.exists() and "/" not in value:
        with contextlib.suppress(ScenarioError):
            path = bundled_scenario(value)
    return load_scenario(path)


def main(argv: t.Sequence[str] | None = None) -> int:
    """Run the fake agent; return its exit status (2 for a bad scenario or usage)."""
    args = _parser().parse_args(argv)
    try:
        scenario = _resolve_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"fakeagent: bad scenario {exc}", file=sys.stderr)
        return 2
    mode = Mode(args.mode) if args.mode else (scenario.mode or Mode.CLAUDE)
    if not os.isatty(0):
        print("fakeagent: stdin is not a terminal", file=sys.stderr)
        return 2
    try:
        log = EventLog(args.log)
    except OSError as exc:
        print(f"fakeagent: cannot open log {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        transcript = Transcript(args.transcript, cwd=str(pathlib.Path.cwd()))
    except OSError as exc:
        log.close()
        msg = f"fakeagent: cannot open transcript {args.transcript}: {exc.strerror}"
        print(msg, file=sys.stderr)
        return 2
    agent = FakeAgent(
        scenario,
        mode,
        log,
        alt_screen=not args.no_alt_screen,
        name=args.name,
        transcript=transcript,
        once=args.print,
    )
    return agent.run()
