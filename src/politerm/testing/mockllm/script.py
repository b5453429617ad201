"""What the mock model says: rules keyed on the last user message, and canned side answers.

A :class:`Rule` matches a regex against the text of the conversation's last *user* message
(tool results are not user text). It answers with text, or with a call of the client's shell
tool followed, once the tool result comes back, by its ``after`` text. Named groups of the
match fill ``{name}`` placeholders in every reply, so a reply can echo a task id or nonce.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

#: The reply when no rule matches a main request.
DEFAULT_REPLY = "OK."


@dataclasses.dataclass(frozen=True)
class Rule:
    """One scripted answer.

    Attributes
    ----------
    match
        Regex searched (``re.DOTALL``) in the last user message's text.
    reply
        Text of the answer; with ``command`` set, text shown before the tool call.
    command
        A shell command the model asks the client to run with its shell tool.
    after
        The answer once the tool result is back (default ``Done.``).
    escalate
        Codex only: ask for the command to run outside the sandbox, which makes Codex ask
        the user for approval.
    times
        How many requests the rule may answer (0: any number).
    delay
        Seconds to wait before streaming the answer (keeps the client busy a while).
    name
        For the request log (default: the pattern).
    tool, arguments
        Anthropic (Claude Code) only: call this tool (an MCP tool such as
        ``mcp__poli__report_status``) with these arguments instead of the shell tool.
    status
        Answer with this HTTP error status instead (e.g. 429, 500, 404); 0 answers normally.
    raw
        Send this text as the whole response body with status 200 (garbage, not the API's
        JSON), instead of a well-formed answer.
    limit
        Answer with the API's own 429 limit error, resetting in this many seconds (with
        ``retry-after`` and the API's reset headers); see :mod:`.limits`.
    limit_kind
        ``rate`` (a rate limit) or ``usage`` (a plan's usage limit).
    """

    match: str
    reply: str = ""
    command: str | None = None
    after: str = "Done."
    escalate: bool = False
    times: int = 0
    delay: float = 0.0
    name: str = ""
    tool: str | None = None
    arguments: t.Mapping[str, t.Any] | None = None
    status: int = 0
    raw: str | None = None
    limit: float | None = None
    limit_kind: t.Literal["rate", "usage"] = "rate"

    @property
    def label(self) -> str:
        """The rule's name in the request log."""
        return self.name or self.match


@dataclasses.dataclass(frozen=True)
class Answer:
    """What to send back for one main request."""

    text: str
    command: str | None = None
    escalate: bool = False
    delay: float = 0.0
    rule: str = ""
    shown: str | None = None  # a command written into the text (no tool protocol)
    call: tuple[str, dict[str, t.Any]] | None = None  # a named tool call (Anthropic only)
    status: int = 0
    raw: str | None = None
    limit: float | None = None
    limit_kind: t.Literal["rate", "usage"] = "rate"


def fill(template: str, match: re.Match[str] | None) -> str:
    r"""Replace ``{name}`` by the match's named groups; other braces stay as they are.

    Examples
    --------
    >>> m = re.search(r"id=(?P<id>\w+)", "id=T1")
    >>> fill('{"id":"{id}"}', m)
    '{"id":"T1"}'
    """
    if match is None:
        return template
    out = template
    for key, value in match.groupdict().items():
        if value is not None:
            out = out.replace("{" + key + "}", value)
    return out


class Script:
    """An ordered list of rules; the first one that matches (and has uses left) answers."""

    def __init__(self, rules: t.Iterable[Rule] = ()) -> None:
        self.rules: list[Rule] = list(rules)
        self._uses: dict[int, int] = {}
        #: The limits have reset: rules with ``limit`` no longer answer.
        self.lifted = False

    def add(self, *rules: Rule) -> None:
        """Append rules (checked after the ones already there)."""
        self.rules.extend(rules)

    def clear(self) -> None:
        """Forget every rule."""
        self.rules.clear()
        self._uses.clear()

    def answer(self, user_text: str, *, tool_result: bool) -> Answer:
        """The answer to a main request whose last user message is ``user_text``.

        With ``tool_result`` (the newest message is the result of our tool call) the
        matching rule's ``after`` text is the answer, so one tool call per user turn.
        """
        for i, rule in enumerate(self.rules):
            m = re.search(rule.match, user_text, re.DOTALL)
            if m is None:
                continue
            if tool_result:
                return Answer(fill(rule.after, m), rule=rule.label)
            if rule.times and self._uses.get(i, 0) >= rule.times:
                continue
            if rule.limit is not None and self.lifted:
                continue
            self._uses[i] = self._uses.get(i, 0) + 1
            return Answer(
                fill(rule.reply, m),
                command=fill(rule.command, m) if rule.command else None,
                escalate=rule.escalate,
                delay=rule.delay,
                rule=rule.label,
                call=(rule.tool, dict(rule.arguments or {})) if rule.tool else None,
                status=rule.status,
                raw=rule.raw,
                limit=rule.limit,
                limit_kind=rule.limit_kind,
            )
        return Answer("Done." if tool_result else DEFAULT_REPLY, rule="")


def fake_json(schema: t.Mapping[str, t.Any]) -> t.Any:
    """A small value that satisfies a JSON schema, for side requests that want JSON.

    Enums prefer ``"user"`` (Gemini's next-speaker check) and otherwise take their first
    value; integers and numbers are 1; strings are ``"mock"`` (``title`` fields get a title).

    Examples
    --------
    >>> fake_json({"type": "object", "properties": {"complexity_score": {"type": "integer"},
    ...     "complexity_reasoning": {"type": "string"}}})
    {'complexity_score': 1, 'complexity_reasoning': 'mock'}
    >>> fake_json({"type": "string", "enum": ["model", "user"]})
    'user'
    """
    if schema.get("enum"):
        values = list(schema["enum"])
        return "user" if "user" in values else values[0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return fake_json(schema[key][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {
            name: ("Mock task" if name == "title" else fake_json(sub))
            for name, sub in props.items()
        }
    if kind == "array":
        items = schema.get("items") or {"type": "string"}
        return [fake_json(items)] if schema.get("minItems") else []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "mock"
