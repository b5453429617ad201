"""The hook command every agent CLI runs: ``python -m politerm.hooks.emit CHANNEL CLI EVENT``.

It reads the event's payload (JSON on stdin for Claude Code and Gemini CLI; the last
argument for Codex's ``notify``; nothing for aider), writes one redacted receipt line
(:func:`politerm.hooks.events.receipt`) to the channel file with a single ``O_APPEND``
write, and exits 0. It never blocks the agent: stdin is read for at most
:data:`STDIN_BOUND` seconds, and a terminal on stdin (aider runs it from its own TTY) is not
read at all. It prints nothing: Claude Code adds a ``UserPromptSubmit`` hook's output to the
model's context and Gemini CLI parses it as the hook's answer. A channel that is missing, not
a regular file of ours, or not private is left alone (the receipt is dropped, the agent goes
on; the screen stays politerm's fallback). The receipt is redacted with the project's
``[redact] patterns`` kept beside the channel (:mod:`politerm.hooks.patterns`); when that
file cannot be trusted, the line only says that an event came (no excerpt, no message).
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import stat
import sys
import time
import typing as t

from politerm.hooks.events import receipt
from politerm.hooks.patterns import channel_redactor

STDIN_BOUND: t.Final = 3.0
"""Seconds the hook waits for its payload on stdin, at most."""

_MAX_PAYLOAD = 4 << 20  # bytes of payload read, at most


def read_stdin(bound: float = STDIN_BOUND) -> bytes:
    """What the agent wrote on stdin until EOF, at most ``bound`` seconds (none from a TTY)."""
    fd = 0
    try:
        if os.isatty(fd):
            return b""
        os.set_blocking(fd, False)
    except OSError:
        return b""
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + bound
    while size < _MAX_PAYLOAD:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def payload_of(raw: bytes | str) -> dict[str, t.Any]:
    """The payload as a dict; anything that is not a JSON object becomes ``{}``.

    Examples
    --------
    >>> payload_of(b'{"prompt": "x"}'), payload_of("[1]"), payload_of(b"")
    ({'prompt': 'x'}, {}, {})
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def append_line(channel: str, line: str) -> bool:
    """Append ``line`` to ``channel`` in one write, only if it is a private file of ours."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(channel, flags)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return False
        data = line.encode("utf-8", "replace")
        # One write of the whole line: O_APPEND makes it land after every other writer's.
        return os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def main(argv: t.Sequence[str] | None = None) -> int:
    """Write the receipt for one hook call; always 0 (an agent never fails on our account)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        return 0
    channel, cli, event = args[0], args[1], args[2]
    raw: bytes | str = args[3] if len(args) > 3 else read_stdin()
    payload = payload_of(raw)
    if event == "notify" and isinstance(payload.get("type"), str):
        event = payload["type"]  # Codex names the event inside its one notify payload
    try:
        redactor = channel_redactor(pathlib.Path(channel))
        line = json.dumps(receipt(cli, event, payload, at=time.time(), redactor=redactor))
    except Exception:  # noqa: BLE001 - a hook must never fail the agent, whatever it sent
        line = json.dumps({"v": 1, "at": time.time(), "cli": cli, "event": event, "kind": "notice"})
    append_line(channel, line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
