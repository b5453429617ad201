"""The :class:`Block` value: one tagged message as an agent sent it.

A block on screen looks like::

    [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1","nonce":"a1b2c3"}]]
    <PLAN>
    1. do the thing
    </PLAN>
    [[/POLI:MSG]]

This module holds the value type, the body normalisation that makes two renderings of the same
block compare equal, and :func:`render_block` to produce a well-formed block (for fake agents
and tests; primers deliberately never show one, see :mod:`politerm.protocol.primer`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import pathlib
import re
import typing as t

from politerm.errors import BlockRejected

OPEN_TAG = "POLI:MSG"
CLOSE_TAG = "/POLI:MSG"


class MessageType(str, enum.Enum):
    """The message types the router knows; other values are kept verbatim in :attr:`Block.type`."""

    PLAN = "plan"
    RESULT = "result"
    STATUS = "status"
    FINAL = "final"
    DONE = "done"
    QUESTION = "question"


#: Inner tag conventionally wrapped around the body of each type (optional on the wire).
INNER_TAGS: t.Final[t.Mapping[str, str]] = {
    MessageType.PLAN.value: "PLAN",
    MessageType.RESULT.value: "RESULT",
    MessageType.STATUS.value: "STATUS",
    MessageType.FINAL.value: "REPORT",
    MessageType.DONE.value: "REPORT",
    MessageType.QUESTION.value: "QUESTION",
}

# Markers a renderer may add, drop or rewrite; none of them carries meaning for equality.
_HTML_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")
_LIST_MARKER = re.compile(r"^(?:\d+[.)]?|[-*+•◦▪‣])\s+")
_PREFIX = re.compile(r"^[\s●•✦┃│⎿⏺]+")
_WS = re.compile(r"\s+")


def normalise_body(body: str) -> str:
    r"""Reduce a body to the words a reader sees, so renderings of one body compare equal.

    Renderers re-wrap long lines, insert or drop blank lines, rewrite list markers
    (``1.`` → ``1``, ``-`` → ``•``), strip emphasis and drop HTML-looking tags. This
    removes all of that and joins everything with single spaces. Used for
    :attr:`Block.dedupe_key` and :func:`politerm.protocol.cross_check`.

    Parameters
    ----------
    body : str
        The body as extracted from a screen or a transcript.

    Returns
    -------
    str
        The normalised text; empty when the body holds no words.

    Examples
    --------
    >>> normalise_body("<PLAN>\n1. do *the* thing\n\n2. check `it`\n</PLAN>")
    'do the thing check it'
    >>> pretty, raw = " 1 do the thing\n 2 check it", "1. do the thing\n2. check it"
    >>> normalise_body(pretty) == normalise_body(raw)
    True
    >>> normalise_body("- nested __dunder__ <b>html</b>") == normalise_body("• nested dunder html")
    True
    """
    words: list[str] = []
    for raw in body.splitlines():
        line = _HTML_TAG.sub("", raw)
        line = _PREFIX.sub("", line)
        line = _LIST_MARKER.sub("", line)
        line = _EMPHASIS.sub("", line)
        line = _WS.sub(" ", line).strip()
        if line:
            words.append(line)
    return " ".join(words)


@dataclasses.dataclass(frozen=True)
class Block:
    """One well-formed tagged message.

    Parameters
    ----------
    to : str
        Addressee (``EXECUTER``, ``PLANNER``, ``ORCH`` ...).
    type : str
        Message type; see :class:`MessageType` for the known ones.
    id : str
        Task or message id (``T1``).
    body : str
        Text between the header and the closing tag, with the rendering gutter and the
        optional inner ``<TAG>`` lines removed. For a ``file`` block, the file's content
        once :func:`politerm.protocol.resolve_file_body` has run.
    header : Mapping[str, Any]
        The whole header object, including keys politerm does not know.
    nonce : str or None
        Per-turn nonce, when the header carried one.
    file : str or None
        Path of the body file relative to the session's message folder.
    sha256 : str or None
        Expected hex digest of the body file.
    raw_lines : tuple of str
        The screen or transcript lines the block was read from, as seen.
    line : int
        Index of the header line in the scanned lines or fed stream; -1 if unknown.
    """

    to: str
    type: str
    id: str
    body: str = ""
    header: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict, hash=False)
    nonce: str | None = None
    file: str | None = None
    sha256: str | None = None
    raw_lines: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    line: int = dataclasses.field(default=-1, compare=False)

    @classmethod
    def from_header(
        cls,
        header: t.Mapping[str, t.Any],
        body: str = "",
        *,
        raw_lines: t.Sequence[str] = (),
        line: int = -1,
    ) -> Block:
        """Build a block from an already validated header mapping.

        Examples
        --------
        >>> b = Block.from_header({"to": "EXECUTER", "type": "plan", "id": "T1", "x": 1}, "go")
        >>> (b.to, b.type, b.id, b.nonce, b.header["x"])
        ('EXECUTER', 'plan', 'T1', None, 1)
        """
        return cls(
            to=str(header["to"]),
            type=str(header["type"]),
            id=str(header["id"]),
            body=body,
            header=dict(header),
            nonce=_opt_str(header.get("nonce")),
            file=_opt_str(header.get("file")),
            sha256=_opt_str(header.get("sha256")),
            raw_lines=tuple(raw_lines),
            line=line,
        )

    def full_header(self) -> dict[str, t.Any]:
        """The header as read, or built from the fields when the block was made without one.

        What :meth:`from_header` reads back into a block of the same fields (a block sent
        to another process, e.g. a fleet node's reply; a built header kept ``file`` and
        ``sha256`` too).

        Examples
        --------
        >>> b = Block("PLANNER", "file", "T1", nonce="n1", file="r.md", sha256="ab")
        >>> b.full_header()
        {'to': 'PLANNER', 'type': 'file', 'id': 'T1', 'nonce': 'n1', 'file': 'r.md', 'sha256': 'ab'}
        >>> Block.from_header(b.full_header()).file
        'r.md'
        """
        if self.header:
            return dict(self.header)
        header: dict[str, t.Any] = {"to": self.to, "type": self.type, "id": self.id}
        optional = {"nonce": self.nonce, "file": self.file, "sha256": self.sha256}
        header.update({k: v for k, v in optional.items() if v is not None})
        return header

    @property
    def kind(self) -> MessageType | None:
        """The type as a :class:`MessageType`, or None for a type politerm does not know."""
        try:
            return MessageType(self.type)
        except ValueError:
            return None

    @property
    def body_lines(self) -> list[str]:
        """Non-blank body lines with trailing blanks removed (blank lines are not stable)."""
        return [ln.rstrip() for ln in self.body.splitlines() if ln.strip()]

    @property
    def normalised_body(self) -> str:
        """:func:`normalise_body` of :attr:`body`."""
        return normalise_body(self.body)

    @property
    def dedupe_key(self) -> str:
        r"""Hash of (nonce, to, type, id, normalised body): equal for redraws of one block.

        Examples
        --------
        >>> a = Block("EXECUTER", "plan", "T1", "1. do the thing\n\n2. check")
        >>> b = Block("EXECUTER", "plan", "T1", " 1 do the thing\n 2 check")
        >>> a.dedupe_key == b.dedupe_key
        True
        >>> a.dedupe_key == Block("EXECUTER", "plan", "T2", a.body).dedupe_key
        False
        """
        material = json.dumps(
            [self.nonce or "", self.to, self.type, self.id, self.normalised_body],
            ensure_ascii=False,
        )
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def with_body(self, body: str) -> Block:
        """Return a copy with another body (e.g. the content of the referenced file)."""
        return dataclasses.replace(self, body=body)

    def render(self, *, inner_tag: str | None = None) -> str:
        """Render this block in wire format; see :func:`render_block`."""
        return render_block(self.header, self.body, inner_tag=inner_tag)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def render_block(
    header: t.Mapping[str, t.Any], body: str = "", *, inner_tag: str | None = None
) -> str:
    """Render a well-formed block: header line, optional inner tags, body, closing line.

    The header is compact one-line JSON so that a screen at 200 columns rarely wraps it.
    Not for primers: a rendered block with the turn's nonce in a prompt could be mistaken
    for a reply when the prompt is echoed.

    Examples
    --------
    >>> header = {"to": "EXECUTER", "type": "plan", "id": "T1"}
    >>> print(render_block(header, "1. go", inner_tag="PLAN"))
    [[POLI:MSG {"to":"EXECUTER","type":"plan","id":"T1"}]]
    <PLAN>
    1. go
    </PLAN>
    [[/POLI:MSG]]
    """
    head = json.dumps(dict(header), separators=(",", ":"), ensure_ascii=False)
    lines = [f"[[{OPEN_TAG} {head}]]"]
    if inner_tag:
        lines.append(f"<{inner_tag}>")
    if body:
        lines.extend(body.rstrip("\n").splitlines())
    if inner_tag:
        lines.append(f"</{inner_tag}>")
    lines.append(f"[[{CLOSE_TAG}]]")
    return "\n".join(lines)


#: Body files larger than this are refused: a message is prose, not a data dump.
MAX_BODY_FILE_BYTES = 4 * 1024 * 1024


def resolve_file_body(block: Block, message_dir: pathlib.Path) -> Block:
    """Fill in the body of a block that references a file in the session's message folder.

    The reference is relative to ``message_dir``; a leading component equal to the
    folder's own name is allowed (``"file": "msgs/T1-plan.md"`` with ``message_dir``
    ``.../msgs``). The resolved path, symlinks followed, must stay inside the folder.

    Parameters
    ----------
    block : Block
        A block; returned unchanged when it has no ``file``.
    message_dir : pathlib.Path
        The session's message folder.

    Returns
    -------
    Block
        A copy whose body is the file's text.

    Raises
    ------
    BlockRejected
        If the path is absolute or escapes the folder, the file is missing, too large or
        not UTF-8, or its SHA-256 differs from the header's ``sha256``.
    """
    if block.file is None:
        return block
    ref = block.file
    rel = pathlib.PurePosixPath(ref.replace("\\", "/"))
    if rel.is_absolute() or re.match(r"^[A-Za-z]:", ref):
        msg = f"file {ref!r}: absolute paths are not allowed"
        raise BlockRejected(msg)
    parts = rel.parts
    if len(parts) > 1 and parts[0] == message_dir.name:
        parts = parts[1:]
    root = message_dir.resolve()
    target = root.joinpath(*parts)
    try:
        resolved = target.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        msg = f"file {ref!r}: not found in the message folder"
        raise BlockRejected(msg) from exc
    if not resolved.is_relative_to(root):
        msg = f"file {ref!r}: escapes the message folder"
        raise BlockRejected(msg)
    if not resolved.is_file():
        msg = f"file {ref!r}: not a regular file"
        raise BlockRejected(msg)
    try:
        with resolved.open("rb") as fh:
            data = fh.read(MAX_BODY_FILE_BYTES + 1)
    except OSError as exc:
        msg = f"file {ref!r}: cannot be read: {exc.strerror}"
        raise BlockRejected(msg) from exc
    if len(data) > MAX_BODY_FILE_BYTES:
        msg = f"file {ref!r}: larger than {MAX_BODY_FILE_BYTES} bytes"
        raise BlockRejected(msg)
    if block.sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != block.sha256.lower():
            msg = f"file {ref!r}: sha256 {digest[:12]}… does not match header {block.sha256[:12]}…"
            raise BlockRejected(msg)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"file {ref!r}: not UTF-8 text"
        raise BlockRejected(msg) from exc
    return block.with_body(text.rstrip("\n"))
