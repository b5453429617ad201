"""Receipts: what an agent's own hook said, as one normalised, redacted JSON line.

Each CLI names its events differently (Claude Code ``UserPromptSubmit``, Gemini CLI
``BeforeAgent``, Codex's ``agent-turn-complete`` notification, aider's notification
command). :func:`receipt` maps one event and its payload onto a :class:`HookKind` and keeps
only what politerm needs, redacted: the submitted prompt as a digest, its length and a short
head and tail (so a delivery can be matched with the prompt it typed), a notification's type
and message, a tool's name. :func:`parse_line` reads such a line back and rejects anything
else with a one-line :class:`~politerm.errors.HookLineError` naming the file and line.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import typing as t

from politerm.errors import HookLineError
from politerm.redact import Redactor

VERSION: t.Final = 1
"""The receipt format; a line of another version is rejected."""

_EXCERPT = 120  # characters of a prompt's head and tail kept
_MESSAGE = 300  # characters of a notification message kept


class HookKind(enum.StrEnum):
    """What an agent's event means to politerm."""

    SESSION = "session"
    """The agent started its session (hooks are live)."""
    PROMPT = "prompt"
    """The agent accepted a prompt (Claude ``UserPromptSubmit``, Gemini ``BeforeAgent``)."""
    APPROVAL = "approval"
    """The agent waits for a permission answer."""
    TOOL = "tool"
    """A tool finished (an approval, if one was pending, was answered)."""
    STOP = "stop"
    """The agent's turn ended (Claude ``Stop``, Gemini ``AfterAgent``, Codex's notify)."""
    NOTICE = "notice"
    """Any other notification (Claude's idle reminder, for instance)."""


# (cli, event name) -> kind; a notification's kind also depends on its type.
_KINDS: t.Final[dict[tuple[str, str], HookKind]] = {
    ("claude", "SessionStart"): HookKind.SESSION,
    ("claude", "UserPromptSubmit"): HookKind.PROMPT,
    ("claude", "PermissionRequest"): HookKind.APPROVAL,
    ("claude", "PostToolUse"): HookKind.TOOL,
    ("claude", "Stop"): HookKind.STOP,
    ("claude", "Notification"): HookKind.NOTICE,
    ("gemini", "SessionStart"): HookKind.SESSION,
    ("gemini", "BeforeAgent"): HookKind.PROMPT,
    ("gemini", "AfterTool"): HookKind.TOOL,
    ("gemini", "AfterAgent"): HookKind.STOP,
    ("gemini", "Notification"): HookKind.NOTICE,
    ("codex", "agent-turn-complete"): HookKind.STOP,
    ("aider", "waiting"): HookKind.STOP,
    ("opencode", "session.idle"): HookKind.STOP,
    ("opencode", "permission.asked"): HookKind.APPROVAL,
    ("opencode", "permission.replied"): HookKind.TOOL,
    ("opencode", "plugin.loaded"): HookKind.SESSION,
    ("opencode", "chat.message"): HookKind.PROMPT,
}
# Notification types that mean "a permission question is open".
_APPROVAL_TYPES: t.Final = frozenset({"permission_prompt", "ToolPermission"})


def kind_of(cli: str, event: str, payload: t.Mapping[str, t.Any]) -> HookKind:
    """The :class:`HookKind` of ``cli``'s ``event`` (NOTICE for anything unknown).

    Examples
    --------
    >>> kind_of("claude", "UserPromptSubmit", {}).value
    'prompt'
    >>> kind_of("claude", "Notification", {"notification_type": "permission_prompt"}).value
    'approval'
    >>> kind_of("gemini", "Notification", {"notification_type": "ToolPermission"}).value
    'approval'
    >>> kind_of("codex", "agent-turn-complete", {}).value, kind_of("x", "y", {}).value
    ('stop', 'notice')
    """
    kind = _KINDS.get((cli, event), HookKind.NOTICE)
    if kind is HookKind.NOTICE and payload.get("notification_type") in _APPROVAL_TYPES:
        return HookKind.APPROVAL
    return kind


def prompt_digest(text: str) -> str:
    r"""The digest a receipt keeps of a prompt: SHA-256 of its normalised text.

    Line ends and surrounding blanks are normalised (CLIs trim what they were sent).

    Examples
    --------
    >>> prompt_digest("hi\r\n") == prompt_digest("  hi")
    True
    """
    norm = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    return hashlib.sha256(norm.encode("utf-8", "replace")).hexdigest()


def _prompt_text(cli: str, payload: t.Mapping[str, t.Any]) -> str | None:
    if cli == "codex":
        msgs = payload.get("input-messages") or payload.get("input_messages")
        if isinstance(msgs, list) and msgs:
            return str(msgs[-1])
        return None
    value = payload.get("prompt")
    return value if isinstance(value, str) else None


def receipt(
    cli: str,
    event: str,
    payload: t.Mapping[str, t.Any],
    *,
    at: float,
    redactor: Redactor | None = None,
) -> dict[str, t.Any]:
    """The receipt line (a dict) for ``cli``'s ``event`` with ``payload``, redacted.

    Examples
    --------
    >>> r = receipt("claude", "UserPromptSubmit", {"prompt": "do it", "session_id": "s1"}, at=1.0)
    >>> r["kind"], r["prompt"]["len"], r["prompt"]["head"], r["session"]
    ('prompt', 5, 'do it', 's1')
    >>> key = "sk-ant-api03-" + "x" * 40
    >>> receipt("gemini", "Notification", {"message": "use " + key}, at=1.0)["message"]
    'use [REDACTED:anthropic-key]'
    >>> own = Redactor(["ACME-[0-9]{6}"])  # a project's [redact] patterns
    >>> r = receipt("claude", "UserPromptSubmit", {"prompt": "ACME-123456 " + "x" * 200},
    ...             at=1.0, redactor=own)
    >>> r["prompt"]["head"][:20], r["prompt"]["len"]
    ('[REDACTED:custom] xx', 212)
    """
    red = redactor or Redactor()
    out: dict[str, t.Any] = {
        "v": VERSION,
        "at": at,
        "cli": cli,
        "event": event,
        "kind": kind_of(cli, event, payload).value,
    }
    session = payload.get("session_id") or payload.get("thread-id") or payload.get("sessionID")
    if isinstance(session, str):
        out["session"] = red.redact(session)[:80]
    prompt = _prompt_text(cli, payload)
    if prompt is not None:
        norm = prompt.replace("\r\n", "\n").strip()
        # Redacted whole, then cut: a secret across the cut would not match its pattern.
        shown = red.redact(norm)
        out["prompt"] = {
            "sha256": prompt_digest(prompt),
            "len": len(norm),
            "head": shown[:_EXCERPT],
            "tail": shown[-_EXCERPT:],
        }
    for key in ("notification_type", "tool_name", "type"):
        value = payload.get(key)
        if isinstance(value, str):
            out[key] = red.redact(value)[:80]
    message = payload.get("message")
    if isinstance(message, str):
        out["message"] = red.redact(message)[:_MESSAGE]
    return out


@dataclasses.dataclass(frozen=True)
class HookEvent:
    """One receipt read back from a channel.

    Attributes
    ----------
    kind
        What it means (:class:`HookKind`).
    cli, event
        Which CLI sent it and its own name for the event.
    at
        When the hook ran (Unix time).
    offset
        Byte offset of the line after this one in the channel (a position to read from).
    prompt_sha256, prompt_head, prompt_tail, prompt_len
        The accepted prompt (PROMPT receipts).
    message
        A notification's message, redacted.
    session
        The CLI's own id of the conversation the event belongs to ("" when it sent none):
        what ``poli up --resume`` resumes that agent with.
    """

    kind: HookKind
    cli: str
    event: str
    at: float
    offset: int = 0
    prompt_sha256: str = ""
    prompt_head: str = ""
    prompt_tail: str = ""
    prompt_len: int = 0
    message: str = ""
    session: str = ""

    def describe(self) -> str:
        """A short phrase for events and evidence.

        Examples
        --------
        >>> HookEvent(HookKind.STOP, "claude", "Stop", 0.0).describe()
        'claude hook Stop (stop)'
        """
        extra = f": {self.message}" if self.message else ""
        return f"{self.cli} hook {self.event} ({self.kind.value}){extra}"

    def matches_prompt(self, text: str, redactor: Redactor | None = None) -> bool:
        r"""Whether this PROMPT receipt is for ``text``.

        It is when the digest is the same, or when the CLI added context around the
        prompt and its head or tail still shows.

        Examples
        --------
        >>> e = parse_line(json.dumps(receipt("claude", "UserPromptSubmit",
        ...     {"prompt": "hello there"}, at=0.0)), where="x:1")
        >>> e.matches_prompt("hello there\n"), e.matches_prompt("other")
        (True, False)
        """
        if self.kind is not HookKind.PROMPT:
            return False
        if self.prompt_sha256 and self.prompt_sha256 == prompt_digest(text):
            return True
        red = redactor or Redactor()
        norm = red.redact(text.replace("\r\n", "\n").strip())
        if not norm:
            return False
        probe = norm[-min(len(norm), 60) :]
        return probe in self.prompt_tail or norm[:60] in self.prompt_head


def parse_line(line: str | bytes, *, where: str, offset: int = 0) -> HookEvent:
    """Read one channel line back; ``where`` (``file:line``) goes into the error.

    Raises
    ------
    HookLineError
        The line is not JSON, not an object, of another version, or lacks a field.

    Examples
    --------
    >>> parse_line('{"v":1,"at":2.5,"cli":"gemini","event":"AfterAgent","kind":"stop"}',
    ...            where="c.jsonl:3").kind.value
    'stop'
    >>> parse_line("not json", where="c.jsonl:4")
    Traceback (most recent call last):
    ...
    politerm.errors.HookLineError: c.jsonl:4: not a hook receipt (not JSON: Expecting value)
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{where}: not a hook receipt (not JSON: {exc.msg})"
        raise HookLineError(msg) from None
    if not isinstance(data, dict):
        msg = f"{where}: not a hook receipt (a JSON {type(data).__name__}, not an object)"
        raise HookLineError(msg)
    if data.get("v") != VERSION:
        msg = f"{where}: hook receipt version {data.get('v')!r} (this politerm reads {VERSION})"
        raise HookLineError(msg)
    try:
        kind = HookKind(data["kind"])
        cli, event, at = str(data["cli"]), str(data["event"]), float(data["at"])
    except (KeyError, ValueError, TypeError) as exc:
        msg = f"{where}: hook receipt lacks a valid field ({exc})"
        raise HookLineError(msg) from None
    prompt = data.get("prompt") if isinstance(data.get("prompt"), dict) else {}
    assert isinstance(prompt, dict)
    return HookEvent(
        kind,
        cli,
        event,
        at,
        offset,
        str(prompt.get("sha256", "")),
        str(prompt.get("head", "")),
        str(prompt.get("tail", "")),
        int(prompt.get("len", 0) or 0),
        str(data.get("message", "")),
        str(data.get("session", "")),
    )
