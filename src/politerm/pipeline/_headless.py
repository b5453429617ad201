"""The wrapper a headless step runs in: run the agent once, write its exit code to a file.

``python -m politerm.pipeline._headless --exit-file F --prompt-file P -- ARGV...`` runs
``ARGV + [prompt]`` (e.g. ``claude -p <prompt>``) with the terminal of its tmux window, then
writes the exit status to ``F`` (through a rename, so the runner never reads half a file) and
exits with it. The runner finds the step finished when ``F`` appears.

``--fake-log LOG`` drives the bundled fake agent, which has no one-shot mode: it runs ARGV
in a pseudo-terminal (mirrored to this window), pastes the prompt, waits for the reply in
the fake agent's JSONL log, and ends it with Ctrl-D; a crash exits with the fake's status.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pathlib
import pty
import select
import struct
import subprocess
import sys
import termios
import time
import typing as t

from politerm._internal.private import write_private
from politerm._internal.vault import reveal_sync

_PASTE_START = b"\x1b[200~"
_PASTE_END = b"\x1b[201~"
_BRACKETED_ON = b"\x1b[?2004h"
# Give the fake agent this long to log a submitted prompt before pressing Enter again.
_RESUBMIT = 2.0


def _events(log: pathlib.Path) -> list[str]:
    try:
        text = log.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(str(json.loads(line).get("event")))
    return out


def _winsize(fd: int) -> None:
    size = struct.pack("HHHH", 50, 200, 0, 0)
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, size)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, size)


def drive_fake(argv: t.Sequence[str], prompt: str, log: pathlib.Path) -> int:
    """Run the fake agent in a pty for one prompt; return its exit status."""
    master, slave = pty.openpty()
    _winsize(slave)
    proc = subprocess.Popen(
        list(argv), stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    seen = b""
    stage = "starting"
    sent_at = 0.0
    out = sys.stdout.buffer
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    out.write(chunk)
                    out.flush()
                    seen = (seen + chunk)[-4096:]
            if proc.poll() is not None:
                break
            events = _events(log)
            if stage == "starting" and _BRACKETED_ON in seen and "start" in events:
                os.write(master, _PASTE_START + prompt.encode() + _PASTE_END)
                time.sleep(0.2)
                os.write(master, b"\r")
                stage, sent_at = "sent", time.monotonic()
            elif stage == "sent":
                if "prompt" in events:
                    stage = "working"
                elif time.monotonic() - sent_at > _RESUBMIT:
                    os.write(master, b"\r")
                    sent_at = time.monotonic()
            if stage == "working" and "reply" in events:
                os.write(master, b"\x04")  # Ctrl-D: the fake agent exits 0
                stage = "ending"
        return proc.wait()
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv: t.Sequence[str] | None = None) -> int:
    """Run one headless step; return (and record) the agent's exit status."""
    parser = argparse.ArgumentParser(prog="python -m politerm.pipeline._headless")
    parser.add_argument("--exit-file", required=True, type=pathlib.Path)
    parser.add_argument("--prompt-file", required=True, type=pathlib.Path)
    parser.add_argument("--fake-log", type=pathlib.Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    prompt = reveal_sync(args.prompt_file.read_text(encoding="utf-8"), os.environ)
    if args.fake_log is not None:
        code = drive_fake(command, prompt, args.fake_log)
    else:
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
