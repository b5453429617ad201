"""A delivery and a turn's end confirmed by the agent's own transcript.

Claude Code, Codex and Gemini CLI write each submitted prompt to their session log
(Claude's project JSONL, Codex's rollout, Gemini's chat JSONL) as a user message; opencode
writes it to its database. :class:`TranscriptCheck` remembers where the transcript ended
before the paste and looks for the prompt among the user messages written after it: a third
source beside the screen and the hooks, and the only agent-side one for Codex, whose hooks
report no prompt event.

Gemini CLI's and opencode's records also say when the turn is over
(:meth:`TranscriptCheck.turn_over`): the model's last message is complete and asked for no
tool. Where no hook reports the agent's stop, that ends a turn (the screen cross-checking).
"""

from __future__ import annotations

import contextlib
import json
import time
import typing as t

from politerm.driver.receipts import Source
from politerm.driver.transcripts import locate_transcript
from politerm.protocol import opencode_db

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
    >>> user_texts("gemini", '{"id":"u1","type":"user","content":[{"text":"go"}]}')
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
    elif fmt == "gemini":
        if obj.get("type") != "user" or not isinstance(obj.get("content"), list):
            return []
        # A tool's result comes back as a user message too, without text.
        content = [{"type": "text", **c} for c in obj["content"] if isinstance(c, dict)]
        kinds = ("text",)
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


def gemini_turn_over(lines: list[str]) -> str | None:
    """How a Gemini CLI turn ended, if the last message of ``lines`` ends it.

    It does when the last message is the model's, complete (its ``tokens`` written) and
    without tool calls (which would be answered by a tool result and another model message).

    Examples
    --------
    >>> done = '{"id":"m","type":"gemini","content":"Hi.","tokens":{"total":9}}'
    >>> gemini_turn_over(['{"id":"u","type":"user","content":[{"text":"x"}]}', done])
    'model message m complete'
    >>> tool = done[:-1] + ',"toolCalls":[{"name":"run_shell_command"}]}'
    >>> gemini_turn_over([done, tool]) is None, gemini_turn_over([done, '{"$set":{}}'])
    (True, 'model message m complete')
    """
    last: dict[str, t.Any] = {}
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") in ("user", "gemini", "info", "error"):
            last = obj
    if last.get("type") != "gemini" or "tokens" not in last or last.get("toolCalls"):
        return None
    return f"model message {last.get('id')} complete"


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

    #: Transcript formats whose records say when a turn is over.
    TURN_FORMATS: t.ClassVar = frozenset({"gemini", "opencode"})

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
        # opencode's rows carry their creation time (ms): what is newer than the paste.
        self.since_ms = int(time.time() * 1000)

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

    def _new_lines(self, path: pathlib.Path) -> list[str]:
        """The complete lines written since the paste (all of a new session file)."""
        start = self.offset if path == self.path else 0
        try:
            with path.open("rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # complete lines only
        return data[:end].decode("utf-8", "replace").splitlines()

    def _after_prompt(self, path: pathlib.Path) -> list[str] | None:
        """The new lines from the user message holding the prompt on (None: not there)."""
        lines = self._new_lines(path)
        for i, raw in enumerate(lines):
            if holds_prompt(user_texts(self.spec.format, raw), self.text):
                return lines[i:]
        return None

    def confirmed(self) -> tuple[Source, str] | None:
        """``(TRANSCRIPT, evidence)`` once the prompt is in the transcript."""
        path = self._locate()
        if path is None:
            return None
        if self.spec.format == "opencode":
            texts = opencode_db.user_prompts(path, self.cwd.resolve(), self.since_ms)
            found = holds_prompt(texts, self.text)
        else:
            found = self._after_prompt(path) is not None
        if found:
            return Source.TRANSCRIPT, f"{self.spec.format} transcript {path.name} holds the prompt"
        return None

    def turn_over(self) -> str | None:
        """What in the transcript says the prompt's turn is over (None: not yet, or unknown)."""
        path = self._locate() if self.spec.format in self.TURN_FORMATS else None
        if path is None:
            return None
        if self.spec.format == "opencode":
            if not holds_prompt(
                opencode_db.user_prompts(path, self.cwd.resolve(), self.since_ms), self.text
            ):
                return None
            ended = opencode_db.turn_over(path, self.cwd.resolve(), self.since_ms)
        else:
            lines = self._after_prompt(path)
            ended = None if lines is None else gemini_turn_over(lines[1:])
        return None if ended is None else f"{self.spec.format} transcript: {ended}"
