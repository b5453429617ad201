"""A delivery confirmed by the agent's own transcript: the prompt written as a user turn.

Claude Code and Codex write each submitted prompt to their session log (Claude's project
JSONL, Codex's rollout) as a user message. :class:`TranscriptCheck` remembers where the
transcript ended before the paste and looks for the prompt among the user messages written
after it: a third source beside the screen and the hooks, and the only agent-side one for
Codex, whose hooks report no prompt event.
"""

from __future__ import annotations

import contextlib
import json
import typing as t

from politerm.driver.receipts import Source
from politerm.driver.transcripts import locate_transcript

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping

    from politerm.agents.profile import TranscriptSpec

_PROBE = 60  # characters of the prompt's tail looked for in a user message


def user_texts(fmt: str, line: str) -> list[str]:
    """The user message texts of one transcript line (``claude`` or ``codex`` format).

    Examples
    --------
    >>> user_texts("claude", '{"type":"user","message":{"role":"user","content":"do it"}}')
    ['do it']
    >>> user_texts("claude", '{"type":"user","message":{"content":[{"type":"tool_result"}]}}')
    []
    >>> user_texts("codex", '{"type":"response_item","payload":{"type":"message",'
    ...            '"role":"user","content":[{"type":"input_text","text":"go"}]}}')
    ['go']
    >>> user_texts("codex", "not json"), user_texts("aider", "#### hi")
    ([], [])
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    if fmt == "claude":
        if obj.get("type") != "user" or obj.get("isSidechain") is True:
            return []
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        kinds: tuple[str, ...] = ("text",)
    elif fmt == "codex":
        item = obj.get("payload") if obj.get("type") == "response_item" else obj
        if not isinstance(item, dict) or item.get("type") != "message":
            return []
        if item.get("role") != "user":
            return []
        content = item.get("content")
        kinds = ("input_text", "text")
    else:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        c["text"]
        for c in content
        if isinstance(c, dict) and c.get("type") in kinds and isinstance(c.get("text"), str)
    ]


def holds_prompt(texts: list[str], prompt: str) -> bool:
    r"""Whether one of ``texts`` is ``prompt`` (the CLI may add context around it).

    Examples
    --------
    >>> holds_prompt(["<env>x</env>", "  run it (nonce=ab12)\n"], "run it (nonce=ab12)")
    True
    >>> holds_prompt(["other"], "run it")
    False
    """
    want = prompt.replace("\r\n", "\n").strip()
    if not want:
        return False
    probe = want[-_PROBE:]
    return any(t_.replace("\r\n", "\n").strip() == want or probe in t_ for t_ in texts)


class TranscriptCheck:
    """Looks for one prompt among the user messages the transcript gains after now.

    Parameters
    ----------
    spec
        The profile's transcript spec (``claude`` or ``codex`` format).
    cwd, env
        The agent's working directory and environment (to locate the transcript).
    text
        The prompt as typed.
    """

    def __init__(
        self,
        spec: TranscriptSpec,
        cwd: pathlib.Path,
        env: Mapping[str, str] | None,
        text: str,
    ) -> None:
        self.spec, self.cwd, self.env, self.text = spec, cwd, env, text
        self.path = self._locate()
        self.offset = self._size(self.path)

    def _locate(self) -> pathlib.Path | None:
        with contextlib.suppress(OSError):
            return locate_transcript(self.spec, self.cwd, self.env)
        return None

    @staticmethod
    def _size(path: pathlib.Path | None) -> int:
        if path is None:
            return 0
        try:
            return path.stat().st_size
        except OSError:
            return 0

    def located(self) -> bool:
        """Whether the agent's transcript can be found now (else nothing is waited for)."""
        return self._locate() is not None

    def confirmed(self) -> tuple[Source, str] | None:
        """``(TRANSCRIPT, evidence)`` once the prompt is in the transcript."""
        path = self._locate()
        if path is None:
            return None
        start = self.offset if path == self.path else 0  # a new session file: all of it
        try:
            with path.open("rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            return None
        end = data.rfind(b"\n") + 1  # complete lines only
        texts: list[str] = []
        for raw in data[:end].decode("utf-8", "replace").splitlines():
            texts.extend(user_texts(self.spec.format, raw))
        if holds_prompt(texts, self.text):
            return Source.TRANSCRIPT, f"{self.spec.format} transcript {path.name} holds the prompt"
        return None
