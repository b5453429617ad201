"""The fake agent's Claude-Code-style session transcript (``--transcript``).

Claude Code keeps a JSONL session log in which ``"type": "user"`` lines hold the prompts
and ``"type": "assistant"`` lines hold the model's text before any rendering. The fake
writes the same shape, so politerm's transcript readers can be tested against a live
agent: the reply text there keeps the fences, tags and newlines the screen drops.
"""

from __future__ import annotations

import json
import os
import pathlib
import typing as t


# uuid and datetime are imported only by an agent that keeps a transcript: every fake
# agent imports this module at start, and most keep none (uuid pulls in platform).
def _uuid4() -> str:
    import uuid

    return str(uuid.uuid4())


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat()


def _clean(text: str) -> str:
    # Undecodable prompt bytes arrive as surrogate escapes; the real CLI stores U+FFFD.
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Transcript:
    """Append-only Claude-style JSONL transcript; a no-op when ``path`` is ``None``.

    One ``write()`` per line (nothing buffered), file mode 0600, UTF-8 as Claude writes it.
    """

    def __init__(self, path: str | pathlib.Path | None, *, cwd: str = "") -> None:
        self.path = pathlib.Path(path) if path is not None else None
        self.session_id = _uuid4() if path is not None else ""
        self.cwd = cwd
        self._parent: str | None = None
        self._prompt_chars = 0
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.fchmod(self._fd, 0o600)  # an existing file keeps its mode otherwise

    def user(self, text: str) -> None:
        """Record a prompt as the agent took it up."""
        self._prompt_chars = len(text)
        self._write("user", {"role": "user", "content": _clean(text)})

    def assistant(self, text: str) -> None:
        """Record a reply's raw text (before fences, wrapping or indentation were applied).

        Its usage is made up but fixed by the texts (4 characters a token, 100 tokens of
        context), so tests can tell what a turn cost.
        """
        content = [{"type": "text", "text": _clean(text)}]
        usage = {"input_tokens": 100 + self._prompt_chars // 4, "output_tokens": len(text) // 4}
        message = {"id": f"msg_{_uuid4().replace('-', '')[:12]}", "role": "assistant"}
        self._write("assistant", {**message, "content": content, "usage": usage})

    def _write(self, kind: str, message: dict[str, t.Any]) -> None:
        if self._fd is None:
            return
        line_id = _uuid4()
        record = {
            "type": kind,
            "message": message,
            "uuid": line_id,
            "parentUuid": self._parent,
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "timestamp": _now(),
        }
        self._parent = line_id
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
