"""The wrapper a headless step runs in: run the agent once, write its exit code to a file.

``python -m politerm.pipeline._headless --exit-file F --prompt-file P -- ARGV...`` runs
``ARGV + [prompt]`` (e.g. ``claude -p <prompt>``) with the terminal of its tmux window, then
writes the exit status to ``F`` (through a rename, so the runner never reads half a file) and
exits with it. The runner finds the step finished when ``F`` appears.

The bundled fake agent runs the same way, with ``--print`` (its one-shot mode).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import typing as t

from politerm._internal.private import write_private
from politerm._internal.vault import reveal_sync


def main(argv: t.Sequence[str] | None = None) -> int:
    """Run one headless step; return (and record) the agent's exit status."""
    parser = argparse.ArgumentParser(prog="python -m politerm.pipeline._headless")
    parser.add_argument("--exit-file", required=True, type=pathlib.Path)
    parser.add_argument("--prompt-file", required=True, type=pathlib.Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    prompt = reveal_sync(args.prompt_file.read_text(encoding="utf-8"), os.environ)
    try:
        code = subprocess.run([*command, prompt], check=False).returncode
    except OSError as exc:
        print(f"poli: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        code = 127
    code = code if code >= 0 else 128 - code  # killed by a signal: 128 + signal number
    write_private(args.exit_file, f"{code}\n")
    print(f"\n[poli] step finished with exit status {code}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
