"""Read the assistant's own text from the CLIs' transcript files.

A transcript holds what the model wrote before any renderer touched it, so a block read
from there cannot have been wrapped, re-indented or stripped of its tags. Three sources:

* Claude Code: ``$CLAUDE_CONFIG_DIR/projects/<slug>/<session>.jsonl``; lines with
  ``"type": "assistant"`` carry ``message.content[]`` items, the ``"type": "text"`` ones
  hold the reply text.
* Codex: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``; lines with
  ``"type": "response_item"`` whose payload is an assistant ``message`` carry
  ``content[]`` items of ``"type": "output_text"``.
* aider: ``.aider.chat.history.md``; user lines start with ``#### ``, aider's own notes
  are blockquoted (``> ``), the rest is the assistant's text.
* Gemini CLI: ``~/.gemini/tmp/<project>/chats/session-*.jsonl``; a line with ``"type":
  "gemini"`` is the model's message (``content``: a string or ``[{"text": ...}]``). A
  message is written again, whole, when it changes (tokens, tool calls): by its ``id``.
* opencode: rows of its SQLite database, read by :mod:`politerm.protocol.opencode_db`.

Readers are tolerant (unknown or broken lines are skipped) and :class:`TranscriptTail`
reads incrementally from a remembered byte offset.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import pathlib
import re
import typing as t

from politerm.protocol.block import normalise_body

if t.TYPE_CHECKING:
    from politerm.protocol.block import Block
    from politerm.protocol.parser import BlockParser


class TranscriptFormat(str, enum.Enum):
    """Which CLI wrote a transcript."""

    CLAUDE = "claude"
    CODEX = "codex"
    AIDER = "aider"
    GEMINI = "gemini"
    OPENCODE = "opencode"


def _load(line: str) -> dict[str, t.Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _texts(content: object, kinds: t.Container[str]) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    out: list[str] = []
    for item in content:
        if isinstance(item, dict) and item.get("type") in kinds:
            text = item.get("text")
            if isinstance(text, str):
                out.append(text)
    return out


def claude_texts(line: str) -> list[str]:
    """Assistant text items of one Claude Code JSONL line (empty for anything else).

    Examples
    --------
    >>> claude_texts('{"type":"assistant","message":{"role":"assistant","content":['
    ...              '{"type":"text","text":"hi"},{"type":"tool_use","name":"Bash"}]}}')
    ['hi']
    >>> claude_texts('{"type":"user","message":{"content":"[[POLI:MSG {}]]"}}')
    []
    >>> claude_texts("not json")
    []
    """
    obj = _load(line)
    if obj is None or obj.get("type") != "assistant" or obj.get("isSidechain") is True:
        # Sidechain lines are a sub-agent talking, not the agent we route for.
        return []
    message = obj.get("message")
    if not isinstance(message, dict):
        return []
    return _texts(message.get("content"), ("text",))


def codex_texts(line: str) -> list[str]:
    """Assistant ``output_text`` items of one Codex rollout line (empty for anything else).

    Also reads the older rollout layout where a line is the bare item.

    Examples
    --------
    >>> codex_texts('{"timestamp":"t","type":"response_item","payload":{"type":"message",'
    ...             '"role":"assistant","content":[{"type":"output_text","text":"done"}]}}')
    ['done']
    >>> codex_texts('{"type":"response_item","payload":{"type":"message","role":"user",'
    ...             '"content":[{"type":"input_text","text":"x"}]}}')
    []
    """
    obj = _load(line)
    if obj is None:
        return []
    item = obj.get("payload") if obj.get("type") == "response_item" else obj
    if (
        not isinstance(item, dict)
        or item.get("type") != "message"
        or item.get("role") != "assistant"
    ):
        # event_msg/agent_message repeats the same text; reading both would double it.
        return []
    return _texts(item.get("content"), ("output_text", "text"))


def gemini_message(line: str) -> tuple[str, str] | None:
    """``(id, text)`` of one Gemini CLI chat line holding a model message, else None.

    Examples
    --------
    >>> gemini_message('{"id":"m1","type":"gemini","content":"Here.","tokens":{"total":9}}')
    ('m1', 'Here.')
    >>> gemini_message('{"id":"m2","type":"gemini","content":[{"text":"a"},{"text":"b"}]}')
    ('m2', 'ab')
    >>> gemini_message('{"id":"u1","type":"user","content":[{"text":"[[POLI:MSG {}]]"}]}')
    >>> gemini_message('{"$set":{"lastUpdated":"2026-11-23T13:57:20.287Z"}}')
    """
    obj = _load(line)
    if obj is None or obj.get("type") != "gemini" or not isinstance(obj.get("id"), str):
        return None
    content = obj.get("content")
    if isinstance(content, list):
        # Parts of one message are pieces of one text, not separate paragraphs.
        return obj["id"], "".join(
            _texts([{"type": "text", **c} for c in content if isinstance(c, dict)], ("text",))
        )
    return (obj["id"], content) if isinstance(content, str) else None


_AIDER_USER = re.compile(r"^#### ")
_AIDER_NOTE = re.compile(r"^> |^>$")
_AIDER_SESSION = re.compile(r"^# aider chat started at ")


def aider_assistant_lines(lines: t.Iterable[str]) -> list[str]:
    """Keep the assistant's lines of ``.aider.chat.history.md``.

    User lines (``#### ``) and aider's blockquoted notes become blank lines, so that a
    block can never run from the assistant's text into a user's prompt.

    Examples
    --------
    >>> aider_assistant_lines(["# aider chat started at 2026-01-01", "#### plan it",
    ...                        "", "Here is the plan.", "> Tokens: 5 sent"])
    ['', '', '', 'Here is the plan.', '']
    """
    out: list[str] = []
    for line in lines:
        line = line.rstrip("\r\n")
        if _AIDER_USER.match(line) or _AIDER_NOTE.match(line) or _AIDER_SESSION.match(line):
            out.append("")
        else:
            out.append(line)
    return out


def _extract(
    fmt: TranscriptFormat, lines: t.Sequence[str], emitted: dict[str, str] | None = None
) -> list[str]:
    if fmt is TranscriptFormat.GEMINI:
        # Each version of a message once: a rewrite with the same text adds nothing.
        seen = {} if emitted is None else emitted
        out = []
        for line in lines:
            found = gemini_message(line)
            if found is not None and found[1] and seen.get(found[0]) != found[1]:
                seen[found[0]] = found[1]
                out.append(found[1])
        return out
    if fmt is TranscriptFormat.AIDER:
        kept = aider_assistant_lines(lines)
        return ["\n".join(kept) + "\n"] if kept else []
    pick = claude_texts if fmt is TranscriptFormat.CLAUDE else codex_texts
    texts: list[str] = []
    for line in lines:
        texts.extend(pick(line))
    return texts


def read_transcript(path: pathlib.Path, fmt: TranscriptFormat | str) -> list[str]:
    """Read every assistant text of a transcript file at once.

    Returns
    -------
    list of str
        One string per assistant text item (JSONL) or one string for the whole
        assistant side (aider).
    """
    tail = TranscriptTail(path, fmt)
    return tail.read_new()


class TranscriptTail:
    """Follow a growing transcript file, returning only what was appended since last time.

    Parameters
    ----------
    path : pathlib.Path
        The transcript file; it may not exist yet.
    fmt : TranscriptFormat or str
        Which CLI writes it.
    offset : int
        Byte offset to start from (0: the beginning; use :meth:`skip_to_end` to ignore
        earlier turns).
    """

    def __init__(self, path: pathlib.Path, fmt: TranscriptFormat | str, offset: int = 0) -> None:
        self.path = pathlib.Path(path)
        self.format = TranscriptFormat(fmt)
        if self.format is TranscriptFormat.OPENCODE:
            msg = "opencode keeps a database, not a file: use politerm.protocol.opencode_db"
            raise ValueError(msg)
        #: Byte offset just after the last complete line consumed.
        self.offset = offset
        self._emitted: dict[str, str] = {}

    def skip_to_end(self) -> None:
        """Start after what the file holds now (e.g. before sending a new prompt)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        self.offset = self._complete_end(size)

    def _complete_end(self, size: int) -> int:
        if size <= self.offset:
            return size
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        cut = data.rfind(b"\n")
        return self.offset if cut < 0 else self.offset + cut + 1

    def read_new(self) -> list[str]:
        """Assistant texts from the complete lines appended since the last call.

        A last line without its newline is left for next time: a JSONL writer may be in
        the middle of it. A file that shrank (rotated, truncated) is read from the start.
        """
        return _extract(self.format, self.read_lines(), self._emitted)

    def read_lines(self) -> list[str]:
        """The complete raw lines appended since the last call (see :meth:`read_new`)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset = 0
        if size == self.offset:
            return []
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        cut = data.rfind(b"\n")
        if cut < 0:
            return []
        chunk, self.offset = data[: cut + 1], self.offset + cut + 1
        return chunk.decode("utf-8", errors="replace").splitlines()

    def feed(self, parser: BlockParser) -> list[Block]:
        """Feed the new assistant text to ``parser``; return the blocks it completed.

        Use a parser made with ``detect_echo=False``: a transcript holds no echo, and
        the assistant's own ``> `` quotes must not be mistaken for one.
        """
        blocks: list[Block] = []
        for text in self.read_new():
            blocks.extend(parser.feed(text if text.endswith("\n") else text + "\n"))
        return blocks


def claude_project_dir(workdir: pathlib.Path, config_dir: pathlib.Path) -> pathlib.Path:
    """Where Claude Code keeps the session logs for ``workdir``.

    Claude Code names the folder after the absolute path with every character other
    than a letter, digit or ``-`` replaced by ``-``.

    Examples
    --------
    >>> claude_project_dir(pathlib.Path("/home/dev/my.project"), pathlib.Path("/h/.claude")).name
    '-home-dev-my-project'
    """
    slug = re.sub(r"[^A-Za-z0-9-]", "-", str(workdir))
    return config_dir / "projects" / slug


def newest(paths: t.Iterable[pathlib.Path]) -> pathlib.Path | None:
    """The most recently modified of ``paths``, or None."""
    best: tuple[float, pathlib.Path] | None = None
    for p in paths:
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if best is None or mtime > best[0]:
            best = (mtime, p)
    return None if best is None else best[1]


def _safe_id(session: str) -> str:
    """``session`` when it can name a file (a CLI's id), else "" (never a path or a glob).

    Examples
    --------
    >>> _safe_id("0b5e3c1a-9f2d-4e7b-8c6a-1d2e3f4a5b6c"), _safe_id("../x"), _safe_id("a*")
    ('0b5e3c1a-9f2d-4e7b-8c6a-1d2e3f4a5b6c', '', '')
    """
    return session if re.fullmatch(r"[A-Za-z0-9_-]{1,80}", session) else ""


def latest_claude_session(
    workdir: pathlib.Path, config_dir: pathlib.Path, session: str = ""
) -> pathlib.Path | None:
    """The newest ``<session>.jsonl`` of ``workdir`` (sub-agent ``agent-*`` logs excluded).

    With ``session``, that conversation's log (Claude Code names it by the id), or None.
    """
    folder = claude_project_dir(workdir, config_dir)
    if session:
        path = folder / f"{_safe_id(session)}.jsonl"
        return path if _safe_id(session) and path.is_file() else None
    return newest(p for p in folder.glob("*.jsonl") if not p.name.startswith("agent-"))


def latest_codex_rollout(codex_home: pathlib.Path, session: str = "") -> pathlib.Path | None:
    """The newest ``sessions/YYYY/MM/DD/rollout-*.jsonl`` under ``codex_home``.

    With ``session``, the newest rollout of that thread (its file name ends with the id).
    """
    if session:
        safe = _safe_id(session)
        if not safe:
            return None
        return newest((codex_home / "sessions").glob(f"*/*/*/rollout-*-{safe}.jsonl"))
    return newest((codex_home / "sessions").glob("*/*/*/rollout-*.jsonl"))


def gemini_project_dir(workdir: pathlib.Path, gemini_dir: pathlib.Path) -> pathlib.Path | None:
    """Gemini CLI's temporary folder for ``workdir`` under ``gemini_dir`` (``~/.gemini``).

    Gemini CLI names it with a short id it records in ``projects.json`` (path → id), and
    writes the path into the folder's ``.project_root``; either finds it.
    """
    root = str(workdir)
    tmp = gemini_dir / "tmp"
    try:
        registry = json.loads((gemini_dir / "projects.json").read_text("utf-8"))
        short = registry.get("projects", {}).get(root)
    except (OSError, ValueError, AttributeError):
        short = None
    if isinstance(short, str) and short and (tmp / short).is_dir():
        return tmp / short
    for marker in tmp.glob("*/.project_root"):
        try:
            if marker.read_text("utf-8").strip() == root:
                return marker.parent
        except OSError:
            continue
    return None


def latest_gemini_session(
    workdir: pathlib.Path, gemini_dir: pathlib.Path, session: str = ""
) -> pathlib.Path | None:
    """The newest ``chats/session-*.jsonl`` Gemini CLI keeps for ``workdir``.

    With ``session``, the newest of that conversation's (Gemini CLI ends the name with the
    id's first 8 characters).
    """
    folder = gemini_project_dir(workdir, gemini_dir)
    if folder is None:
        return None
    if session:
        safe = _safe_id(session)[:8]
        return newest((folder / "chats").glob(f"session-*-{safe}.jsonl")) if safe else None
    return newest((folder / "chats").glob("session-*.jsonl"))


@dataclasses.dataclass(frozen=True)
class CrossCheck:
    """Whether a block read from the screen matches the one in the transcript.

    Truthy when they agree; :attr:`mismatches` names each field that differs.
    """

    mismatches: tuple[str, ...] = ()

    @property
    def agree(self) -> bool:
        """No field differs."""
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.agree


def cross_check(screen_block: Block, transcript_block: Block) -> CrossCheck:
    r"""Compare a screen block with its transcript counterpart, ignoring rendering damage.

    Headers must match on to/type/id/nonce/file/sha256; bodies are compared after
    :func:`~politerm.protocol.block.normalise_body`, which forgives wrapping, list markers,
    emphasis and dropped tags.

    Examples
    --------
    >>> from politerm.protocol.block import Block
    >>> screen = Block("EXECUTER", "plan", "T1", " 1 do the thing\n 2 check the thing")
    >>> raw_body = "<PLAN>\n1. do the thing\n2. check the thing\n</PLAN>"
    >>> raw = Block("EXECUTER", "plan", "T1", raw_body)
    >>> bool(cross_check(screen, raw))
    True
    >>> cross_check(screen, Block("EXECUTER", "plan", "T2", raw.body)).mismatches
    ("id: 'T1' != 'T2'",)
    """
    mismatches: list[str] = []
    for name in ("to", "type", "id", "nonce", "file", "sha256"):
        a, b = getattr(screen_block, name), getattr(transcript_block, name)
        if a != b:
            mismatches.append(f"{name}: {a!r} != {b!r}")
    a_body = normalise_body(screen_block.body)
    b_body = normalise_body(transcript_block.body)
    if a_body != b_body:
        at = next(
            (i for i, (x, y) in enumerate(zip(a_body, b_body, strict=False)) if x != y),
            min(len(a_body), len(b_body)),
        )
        mismatches.append(
            f"body differs at character {at}: {a_body[at : at + 30]!r} != {b_body[at : at + 30]!r}"
        )
    return CrossCheck(tuple(mismatches))
