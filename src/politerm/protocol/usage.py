"""Token usage as the agent CLIs record it in their own transcripts.

A :class:`UsageReader` turns the lines a transcript gained into the tokens they record:
``(key, Usage)`` entries, where the key names a model message that may be written again
(its newest usage counts, once) and None is a count of its own. One reader is registered
per transcript format (``claude``, ``codex``, ``aider``, ``gemini``, ``opencode`` here);
another format plugs its usage in with :func:`register_usage_reader`::

    def my_usage(lines: Sequence[str]) -> list[tuple[str | None, Usage]]: ...
    register_usage_reader("mine", my_usage)

What each CLI writes:

* Claude Code: every ``assistant`` line carries ``message.usage`` (``input_tokens``,
  ``output_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``); the
  content blocks of one model message repeat it, so each ``message.id`` counts once.
* Codex: ``event_msg`` lines of type ``token_count`` carry ``info.last_token_usage`` (the
  request just made); ``cached_input_tokens`` is part of ``input_tokens``.
* aider: a note ``> Tokens: 2.3k sent, 45 received.`` after each reply (rounded by aider).
* Gemini CLI: ``"type": "gemini"`` lines carry ``tokens`` (``input``, ``output``,
  ``cached``, ``thoughts``, ``tool``); a message is written again, whole, by its ``id``.
* opencode: its database's ``step-finish`` parts carry ``tokens`` (``input``, ``output``,
  ``reasoning``, ``cache.read``, ``cache.write``); the database tail hands them over as one
  JSON line each (:meth:`politerm.protocol.opencode_db.OpencodeTail.read_lines`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Usage:
    """Tokens sent to the model (``input``, ``cached`` of them from a cache) and received.

    Examples
    --------
    >>> (Usage(10, 2) + Usage(5, 1, cached=4)).total
    18
    """

    input: int = 0
    output: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input, self.output + other.output, self.cached + other.cached
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            max(0, self.input - other.input),
            max(0, self.output - other.output),
            max(0, self.cached - other.cached),
        )

    def __bool__(self) -> bool:
        return bool(self.input or self.output)

    def words(self) -> str:
        """``1,234 tokens (1,000 in, 234 out)``."""
        return f"{self.total:,} tokens ({self.input:,} in, {self.output:,} out)"


Entries = list[tuple[str | None, Usage]]


class UsageReader(t.Protocol):
    """Reads the tokens recorded in lines a transcript gained (whole lines only)."""

    def __call__(self, lines: Sequence[str], /) -> Entries:
        """The ``(message key or None, usage)`` entries ``lines`` record."""
        ...


_READERS: dict[str, UsageReader] = {}


def register_usage_reader(fmt: str, reader: UsageReader) -> None:
    """Use ``reader`` for transcripts of format ``fmt`` (replaces an earlier one)."""
    _READERS[fmt] = reader


def usage_reader(fmt: str) -> UsageReader | None:
    """The reader for transcripts of format ``fmt``; None when none is registered."""
    return _READERS.get(fmt)


def _json(line: str) -> dict[str, t.Any] | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def claude_usage(lines: Sequence[str]) -> Entries:
    """Tokens in Claude Code JSONL lines, keyed by model message.

    Examples
    --------
    >>> line = ('{"type":"assistant","message":{"id":"m1","usage":{"input_tokens":3,'
    ...         '"cache_read_input_tokens":100,"output_tokens":7}}}')
    >>> claude_usage([line])
    [('m1', Usage(input=103, output=7, cached=100))]
    """
    out: Entries = []
    for line in lines:
        rec = _json(line)
        if rec is None or rec.get("type") != "assistant":
            continue
        msg = rec.get("message")
        usage = msg.get("usage") if isinstance(msg, dict) else None
        if not isinstance(usage, dict):
            continue
        cached = _int(usage.get("cache_read_input_tokens"))
        fresh = _int(usage.get("input_tokens")) + _int(usage.get("cache_creation_input_tokens"))
        key = str(msg["id"]) if isinstance(msg, dict) and msg.get("id") else None
        out.append((key, Usage(fresh + cached, _int(usage.get("output_tokens")), cached)))
    return out


def codex_usage(lines: Sequence[str]) -> Entries:
    """Tokens in Codex rollout lines (the ``token_count`` events).

    Examples
    --------
    >>> codex_usage(['{"type":"event_msg","payload":{"type":"token_count","info":'
    ...              '{"last_token_usage":{"input_tokens":50,"cached_input_tokens":20,'
    ...              '"output_tokens":5}}}}'])
    [(None, Usage(input=50, output=5, cached=20))]
    """
    out: Entries = []
    for line in lines:
        rec = _json(line)
        payload = rec.get("payload") if rec is not None else None
        if not isinstance(payload, dict) or payload.get("type") != "token_count":
            continue
        info = payload.get("info")
        last = info.get("last_token_usage") if isinstance(info, dict) else None
        if isinstance(last, dict):
            usage = Usage(
                _int(last.get("input_tokens")),
                _int(last.get("output_tokens")),
                _int(last.get("cached_input_tokens")),
            )
            out.append((None, usage))
    return out


_AIDER = re.compile(
    r"Tokens: (?P<sent>[\d.,]+)(?P<sk>[km]?) sent(?:, (?P<cache>[\d.,]+)(?P<ck>[km]?) "
    r"cache (?:write|hit)[^,]*)*, (?P<recv>[\d.,]+)(?P<rk>[km]?) received",
    re.IGNORECASE,
)


def _count(number: str, suffix: str) -> int:
    value = float(number.replace(",", ""))
    return round(value * {"k": 1_000, "m": 1_000_000}.get(suffix.lower(), 1))


def aider_usage(lines: Sequence[str]) -> Entries:
    """Tokens in ``.aider.chat.history.md`` lines (aider's own rounded counts).

    Examples
    --------
    >>> aider_usage(["> Tokens: 2.3k sent, 45 received. Cost: $0.01 message."])
    [(None, Usage(input=2300, output=45, cached=0))]
    """
    out: Entries = []
    for line in lines:
        m = _AIDER.search(line)
        if m:
            out.append((None, Usage(_count(m["sent"], m["sk"]), _count(m["recv"], m["rk"]))))
    return out


def gemini_usage(lines: Sequence[str]) -> Entries:
    """Tokens in Gemini CLI chat lines, keyed by message (rewritten as it grows).

    Examples
    --------
    >>> line = '{"id":"m1","type":"gemini","tokens":{"input":90,"output":6,"cached":40}}'
    >>> gemini_usage([line])
    [('m1', Usage(input=90, output=6, cached=40))]
    """
    out: Entries = []
    for line in lines:
        rec = _json(line)
        if rec is None or rec.get("type") != "gemini" or not isinstance(rec.get("id"), str):
            continue
        tokens = rec.get("tokens")
        if isinstance(tokens, dict):
            output = _int(tokens.get("output")) + _int(tokens.get("thoughts"))
            usage = Usage(_int(tokens.get("input")), output, _int(tokens.get("cached")))
            out.append((rec["id"], usage))
    return out


def opencode_usage(lines: Sequence[str]) -> Entries:
    """Tokens of opencode's ``step-finish`` parts (one per model request), keyed by part.

    opencode counts cache reads and writes apart from ``input``, and reasoning apart from
    ``output``; here they are part of them, as for the other CLIs.

    Examples
    --------
    >>> opencode_usage(['{"id":"p1","type":"step-finish","tokens":{"input":10,"output":700,'
    ...                 '"reasoning":33,"cache":{"write":5,"read":200}}}'])
    [('p1', Usage(input=215, output=733, cached=200))]
    """
    out: Entries = []
    for line in lines:
        rec = _json(line)
        if rec is None or rec.get("type") != "step-finish":
            continue
        tokens = rec.get("tokens")
        if not isinstance(tokens, dict):
            continue
        cache = tokens.get("cache")
        if not isinstance(cache, dict):
            cache = {}
        read, write = _int(cache.get("read")), _int(cache.get("write"))
        usage = Usage(
            _int(tokens.get("input")) + read + write,
            _int(tokens.get("output")) + _int(tokens.get("reasoning")),
            read,
        )
        key = rec.get("id")
        out.append((key if isinstance(key, str) else None, usage))
    return out


register_usage_reader("claude", claude_usage)
register_usage_reader("codex", codex_usage)
register_usage_reader("aider", aider_usage)
register_usage_reader("gemini", gemini_usage)
register_usage_reader("opencode", opencode_usage)
