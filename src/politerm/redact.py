"""Secret redaction applied before anything reaches a transcript, a record, a log or an export.

Built-in patterns cover the common provider keys and tokens (OpenAI, Anthropic, Google,
GitHub, AWS, Slack), JWTs, PEM private key blocks and ``password=``-style pairs; config adds
its own (``[redact] patterns``). Every match becomes ``[REDACTED:<kind>]``.

:class:`Redactor` works on whole texts; :class:`LineRedactor` on a stream of lines (a
transcript being written), holding back a private key block until it is complete so that no
line of it reaches the file; :class:`ChunkRedactor` on a terminal stream cut anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Iterable

# The words a ``password=``-style pair starts with.
_SECRET_WORDS: t.Final = "(?:password|passwd|pwd|secret|api_?key|access_?token|auth_?token|token)"

#: Built-in patterns, most specific first (an Anthropic key also looks like an OpenAI one).
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private-key",
        (
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        ),
    ),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("google-key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "aws-secret-key",
        (
            r"(?i)(?<![A-Za-z0-9])(?:aws_?secret_?access_?key|aws_?secret)\b[\"']?\s*[:=]\s*[\"']?"
            r"[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"
        ),
    ),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    (
        "password",
        (
            # After a path separator and before a colon the word is a file's name, as in
            # "/etc/passwd: Permission denied"; with "=" it is a secret wherever it stands.
            rf"(?i)(?:(?<![/\\])\b{_SECRET_WORDS}\b[\"']?\s*[:=]|(?<=[/\\]){_SECRET_WORDS}"
            r"\b[\"']?\s*=)\s*(?:\"[^\"\n]+\"|'[^'\n]+'|[^\s\"',;]+)"
        ),
    ),
)

#: For each built-in pattern, strings one of which any match contains (in ``casefold()``
#: form): a text without any of them is not searched with it. No hint of a case-blind
#: pattern holds an "i", the one letter ``re.IGNORECASE`` matches that ``casefold()`` does
#: not produce (from "ı").
_HINTS: dict[str, tuple[str, ...]] = {
    "private-key": ("-----begin",),
    "anthropic-key": ("sk-ant-",),
    "openai-key": ("sk-",),
    "google-key": ("aiza",),
    "github-token": ("gh",),
    "aws-access-key": ("akia", "asia"),
    "aws-secret-key": ("aws",),
    "slack-token": ("xox",),
    "jwt": ("eyj",),
    "password": ("pass", "pwd", "secret", "key", "token"),
}

_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
#: A private key block longer than this many lines is cut off and redacted as it is.
MAX_PEM_LINES = 200


def _marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclasses.dataclass(frozen=True)
class RedactResult:
    """A redacted text and how many secrets were replaced."""

    text: str
    count: int


class Redactor:
    """Replaces secrets in text.

    Parameters
    ----------
    extra
        Additional regular expressions (from config); matches become ``[REDACTED:custom]``.

    Examples
    --------
    >>> r = Redactor()
    >>> r.redact("key=sk-proj-" + "a" * 30 + " ok")
    'key=[REDACTED:openai-key] ok'
    >>> r.redact("login with password=hunter2 now")
    'login with [REDACTED:password] now'
    >>> r.redact("nothing to see")
    'nothing to see'
    >>> r.redact("/etc/passwd: not inside the message directory; passwd: hunter2")
    '/etc/passwd: not inside the message directory; [REDACTED:password]'
    >>> r.redact("db/password=hunter2")
    'db/[REDACTED:password]'
    """

    def __init__(self, extra: Iterable[str] = ()) -> None:
        pats: list[tuple[str, re.Pattern[str]]] = [
            (kind, re.compile(p, re.DOTALL)) for kind, p in BUILTIN_PATTERNS
        ]
        #: The config patterns, as given (another process builds the same redactor from them).
        self.extra = tuple(extra)
        for p in self.extra:
            try:
                pats.append(("custom", re.compile(p)))
            except re.error as exc:
                msg = f"redact pattern {p!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        self.patterns = tuple(pats)
        self._hints = tuple(
            _HINTS.get(kind) if i < len(BUILTIN_PATTERNS) else None
            for i, (kind, _) in enumerate(pats)
        )

    def _candidates(self, text: str) -> list[tuple[str, re.Pattern[str]]]:
        """The patterns that may match ``text`` (each run over it costs a full scan)."""
        folded = text.casefold()
        out = []
        for pat, hints in zip(self.patterns, self._hints, strict=True):
            if hints is None:
                out.append(pat)
                continue
            for hint in hints:
                if hint in folded:
                    out.append(pat)
                    break
        return out

    def scan(self, text: str) -> RedactResult:
        """Redact ``text`` and count the replacements."""
        count = 0
        for kind, rx in self._candidates(text):
            text, n = rx.subn(_marker(kind), text)
            count += n
        return RedactResult(text, count)

    def redact(self, text: str) -> str:
        """Redact ``text``."""
        return self.scan(text).text

    def tagged(self, text: str) -> tuple[str, dict[str, str]]:
        """Redact ``text`` with a tag per distinct secret, and return the secrets by tag.

        The tag is a digest of the secret, so the same secret gets the same marker in every
        process; :func:`reveal` puts the secrets back where a vault holds them.

        Examples
        --------
        >>> text, found = Redactor().tagged("use ghp_" + "a" * 36 + " please")
        >>> text
        'use [REDACTED:github-token#bda1adbfd8ba678a] please'
        >>> list(found.values()) == ["ghp_" + "a" * 36]
        True
        >>> Redactor().tagged(text)[0] == text  # already redacted: unchanged
        True
        """
        found: dict[str, str] = {}
        for kind, rx in self._candidates(text):

            def one(match: re.Match[str], kind: str = kind) -> str:
                tag = secret_tag(match.group(0))
                found[tag] = match.group(0)
                return f"[REDACTED:{kind}#{tag}]"

            text = rx.sub(one, text)
        return text, found

    def redact_opt(self, text: str | None) -> str | None:
        """Redact ``text`` unless it is None."""
        return None if text is None else self.redact(text)

    def redact_json(self, value: t.Any) -> t.Any:
        """Redact every string inside a JSON-like value (dicts, lists, strings)."""
        return map_strings(value, self.redact)


def map_strings(value: t.Any, fn: t.Callable[[str], t.Any]) -> t.Any:
    """``value`` (JSON-like: dicts, lists, strings) with ``fn`` applied to each string in it.

    Keys are names, kept as they are; a tuple comes back a list, as JSON has it.

    Examples
    --------
    >>> map_strings({"prompt": "pw=1", "n": [1, ("pw=2",)]}, lambda s: s.replace("pw=", "*"))
    {'prompt': '*1', 'n': [1, ['*2']]}
    """
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(v, fn) for v in value]
    return value


TAG_RE: t.Final = re.compile(r"\[REDACTED:(?P<kind>[a-z0-9-]+)#(?P<tag>[0-9a-f]{16})\]")
"""A marker written by :meth:`Redactor.tagged`."""


def secret_tag(secret: str) -> str:
    """The tag of a secret: 16 hex digits of its BLAKE2b digest.

    Examples
    --------
    >>> secret_tag("hunter2")
    '56935d69979224a3'
    """
    return hashlib.blake2b(secret.encode("utf-8"), digest_size=8, person=b"politerm").hexdigest()


def reveal(text: str, lookup: t.Callable[[str], str | None]) -> tuple[str, list[str]]:
    """Put secrets back into tagged markers; markers ``lookup`` does not know stay.

    Returns
    -------
    tuple
        The text, and the tags that could not be revealed.

    Examples
    --------
    >>> reveal("a [REDACTED:password#0123456789abcdef] b", {"0123456789abcdef": "pw=1"}.get)
    ('a pw=1 b', [])
    >>> reveal("[REDACTED:jwt#ffffffffffffffff]", {}.get)
    ('[REDACTED:jwt#ffffffffffffffff]', ['ffffffffffffffff'])
    """
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        value = lookup(match.group("tag"))
        if value is None:
            missing.append(match.group("tag"))
            return match.group(0)
        return value

    return TAG_RE.sub(one, text), missing


class LineRedactor:
    """Redacts a stream of complete lines, holding private key blocks until they end.

    Examples
    --------
    >>> lr = LineRedactor(Redactor())
    >>> lr.push("-----BEGIN PRIVATE KEY-----"), lr.push("MIIabc")
    ([], [])
    >>> lr.push("-----END PRIVATE KEY-----")
    ['[REDACTED:private-key]']
    >>> lr.push("plain")
    ['plain']
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._held: list[str] = []
        self.count = 0

    def push(self, line: str) -> list[str]:
        """Take one line; return the lines that may be written now."""
        if self._held:
            self._held.append(line)
            if _PEM_END.search(line) or len(self._held) > MAX_PEM_LINES:
                return self._release()
            return []
        if _PEM_BEGIN.search(line) and not _PEM_END.search(line):
            self._held.append(line)
            return []
        res = self.redactor.scan(line)
        self.count += res.count
        return [res.text]

    def _release(self) -> list[str]:
        held, self._held = self._held, []
        text = "\n".join(held)
        if not _PEM_END.search(text):
            # Cut off (too long or the stream ended): never write any of it.
            self.count += 1
            return [_marker("private-key")]
        res = self.redactor.scan(text)
        self.count += res.count
        return res.text.split("\n")

    def flush(self) -> list[str]:
        """The stream ended: release whatever is held (redacted)."""
        return self._release() if self._held else []


class ChunkRedactor:
    r"""Redacts a byte stream that arrives in arbitrary chunks (a pane's ``%output``).

    A secret may be split across two chunks, so the unfinished last line is held back
    until the next chunk (or :meth:`flush`) completes it; a private key block is held until
    it ends, and once flushed unfinished, the rest of it is dropped as it arrives.

    Parameters
    ----------
    redactor
        The patterns.
    hold
        At most this many characters of an unfinished line are held back.

    Examples
    --------
    >>> cr = ChunkRedactor(Redactor())
    >>> cr.feed("use ghp_" + "a" * 20)
    ''
    >>> cr.feed("b" * 20 + " done\r\nnext")
    'use [REDACTED:github-token] done\r\n'
    >>> cr.flush()
    'next'
    >>> cr.feed("key sk-ant-api03"), cr.flush(), cr.feed("-" + "x" * 30 + " ok\n")
    ('', 'key ', '[REDACTED:anthropic-key] ok\n')
    >>> cr.feed("-----BEGIN PRIVATE KEY-----\nMIIabc\n"), cr.flush()
    ('', '[REDACTED:private-key]')
    >>> cr.feed("MIIdef\n-----END PRIVATE KEY-----\nafter\n")
    '\nafter\n'
    """

    def __init__(self, redactor: Redactor, *, hold: int = 512) -> None:
        self.redactor = redactor
        self.hold = hold
        self._pending = ""
        self._dropping = 0  # > 0: inside a flushed, unfinished key block (lines seen)

    @property
    def pending(self) -> bool:
        """Whether text is held back (call :meth:`flush` after a pause)."""
        return bool(self._pending)

    def feed(self, text: str) -> str:
        """Take the next chunk; return the redacted text that may be shown now."""
        if self._dropping:
            text = self._drop(text)
        buf = self._pending + text
        begin = _last_open_pem(buf)
        if begin is not None:
            split = begin
        else:
            split = max(buf.rfind("\n"), buf.rfind("\r")) + 1
            if len(buf) - split > self.hold:
                # A very long line: keep only its last word(s) back.
                cut = len(buf) - self.hold
                space = max(buf.rfind(" ", 0, cut), buf.rfind("\x1b", 0, cut))
                split = space + 1 if space >= split else cut
        self._pending = buf[split:]
        return self.redactor.redact(buf[:split])

    def flush(self) -> str:
        """Release what is held, redacted, but for the start of a secret still being written.

        An unfinished key block never shows; a trailing word that begins like a secret
        (``sk-…``, ``ghp_…``, ``password=…``) stays held until the text after it arrives.
        """
        buf, self._pending = self._pending, ""
        begin = _last_open_pem(buf)
        if begin is None:
            start = _SECRET_START.search(buf)
            if start is not None:
                buf, self._pending = buf[: start.start()], buf[start.start() :]
            return self.redactor.redact(buf)
        self._dropping = 1
        return self.redactor.redact(buf[:begin]) + _marker("private-key")

    def _drop(self, text: str) -> str:
        end = _PEM_END.search(text)
        if end is not None:
            self._dropping = 0
            return text[end.end() :]
        self._dropping += text.count("\n")
        if self._dropping > MAX_PEM_LINES:
            self._dropping = 0
        return ""


# The beginning of a secret, unfinished at the end of a text (see ChunkRedactor.flush).
_SECRET_START = re.compile(
    r"(?:\b(?:sk-|gh[pousr]_|github_pat_|AKIA|ASIA|AIza|xox[abposr]-|eyJ)[\w./+=-]*"
    rf"|(?i:(?:(?<![/\\])\b{_SECRET_WORDS}[\"']?\s*[:=]|(?<=[/\\]){_SECRET_WORDS}[\"']?\s*=)"
    r"\s*[^\s]*))\Z"
)


def _last_open_pem(text: str) -> int | None:
    """Where a private key block that has not ended yet begins in ``text``, if one does."""
    begins = list(_PEM_BEGIN.finditer(text))
    if not begins or _PEM_END.search(text, begins[-1].end()):
        return None
    return begins[-1].start()


class _RedactingFactory:
    """A log record factory that redacts the formatted message of every record."""

    def __init__(self, redactor: Redactor, previous: t.Callable[..., logging.LogRecord]) -> None:
        self.redactor = redactor
        self.previous = previous

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return record
        record.msg = self.redactor.redact(message)
        record.args = None
        return record


def install_log_redaction(redactor: Redactor) -> t.Callable[[], None]:
    """Redact every log record's message from now on (all loggers, all handlers).

    Returns a function that restores the previous record factory.
    """
    previous = logging.getLogRecordFactory()
    logging.setLogRecordFactory(_RedactingFactory(redactor, previous))

    def restore() -> None:
        logging.setLogRecordFactory(previous)

    return restore
