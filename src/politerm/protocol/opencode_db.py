"""opencode's own record of a session: the assistant's text parts in its SQLite database.

opencode (1.18) keeps its sessions in ``$XDG_DATA_HOME/opencode/opencode.db`` (default
``~/.local/share/opencode``). Three tables matter:

* ``session``: ``directory`` is the working directory; ``parent_id`` is set for a
  sub-agent's session, which is not the agent we route for;
* ``message``: ``data`` is JSON with the ``role`` (``user`` or ``assistant``);
* ``part``: ``data`` is JSON; ``type: "text"`` parts hold the text, rewritten while it
  streams, with ``time.end`` set once the part is complete; a ``step-finish`` part closes
  each model request with its ``tokens``.

So a part is read once, when it has ended. The database is opened read-only for each
read (the TUI writes it in WAL mode) and any error reading it counts as "nothing new", as
for the other transcripts: the screen stays the source of truth.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sqlite3
import typing as t

if t.TYPE_CHECKING:
    from politerm.protocol.block import Block
    from politerm.protocol.parser import BlockParser

_SESSION = (
    "SELECT id FROM session WHERE directory = ? AND parent_id IS NULL "
    "ORDER BY time_updated DESC, id DESC LIMIT 1"
)
_PARTS = (
    "SELECT p.id, p.data, m.data FROM part p JOIN message m ON m.id = p.message_id "
    "WHERE p.session_id = ? ORDER BY p.time_created, p.id"
)


def opencode_db(data_home: pathlib.Path) -> pathlib.Path | None:
    """The database under ``data_home`` (``$XDG_DATA_HOME``), if opencode has made it."""
    path = data_home / "opencode" / "opencode.db"
    return path if path.is_file() else None


def finished_text(part_data: str, message_data: str) -> str | None:
    """The text of a complete assistant text part (None for anything else).

    Examples
    --------
    >>> done = '{"type":"text","text":"Here.","time":{"start":1,"end":2}}'
    >>> finished_text(done, '{"role":"assistant"}')
    'Here.'
    >>> finished_text('{"type":"text","text":"Her","time":{"start":1}}', '{"role":"assistant"}')
    >>> finished_text(done, '{"role":"user"}')
    >>> finished_text('{"type":"step-finish"}', '{"role":"assistant"}')
    """
    try:
        part, message = json.loads(part_data), json.loads(message_data)
    except ValueError:
        return None
    if not isinstance(part, dict) or not isinstance(message, dict):
        return None
    if message.get("role") != "assistant" or part.get("type") != "text":
        return None
    if part.get("synthetic") is True:
        return None  # text opencode made up itself, not the model's
    when = part.get("time")
    text = part.get("text")
    if not isinstance(when, dict) or when.get("end") is None or not isinstance(text, str):
        return None
    return text


class OpencodeTail:
    """Follow the newest opencode session of ``workdir``, returning parts not read before.

    The same interface as :class:`politerm.protocol.transcript.TranscriptTail`.

    Parameters
    ----------
    path : pathlib.Path
        ``opencode.db``.
    workdir : pathlib.Path
        The agent's working directory (the session's ``directory``).
    """

    def __init__(self, path: pathlib.Path, workdir: pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        self.workdir = str(workdir)
        self._read: set[str] = set()

    def _rows(self) -> list[tuple[str, str, str]]:
        if not self.path.is_file():
            return []
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=2.0)) as db:
                row = db.execute(_SESSION, (self.workdir,)).fetchone()
                if row is None:
                    return []
                return [(str(a), str(b), str(c)) for a, b, c in db.execute(_PARTS, (row[0],))]
        except sqlite3.Error:
            return []

    def skip_to_end(self) -> None:
        """Count every part there now as read (e.g. before sending a new prompt)."""
        self._read.update(part_id for part_id, _, _ in self._rows())

    def read_new(self) -> list[str]:
        """Assistant texts of the parts that ended since the last call."""
        out = []
        for part_id, part, message in self._rows():
            if part_id in self._read:
                continue
            text = finished_text(part, message)
            if text is None:
                continue
            self._read.add(part_id)
            out.append(text)
        return out

    def read_lines(self) -> list[str]:
        """The step-finish parts (their token counts) that appeared since the last call.

        One JSON line each, with the part's ``id``, for
        :func:`politerm.protocol.usage.opencode_usage`.
        """
        out = []
        for part_id, part, _message in self._rows():
            if part_id in self._read or '"step-finish"' not in part:
                continue
            try:
                data = json.loads(part)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("type") == "step-finish":
                self._read.add(part_id)
                out.append(json.dumps({**data, "id": part_id}))
        return out

    def feed(self, parser: BlockParser) -> list[Block]:
        """Feed the new assistant text to ``parser``; return the blocks it completed."""
        blocks: list[Block] = []
        for text in self.read_new():
            blocks.extend(parser.feed(text if text.endswith("\n") else text + "\n"))
        return blocks


_SINCE = (
    "SELECT m.id, p.data, m.data FROM message m LEFT JOIN part p ON p.message_id = m.id "
    "WHERE m.session_id = ? AND m.time_created >= ? ORDER BY m.time_created, m.id, "
    "p.time_created, p.id"
)


def _since(path: pathlib.Path, workdir: pathlib.Path, since_ms: int) -> list[tuple[str, str, str]]:
    """``(message id, part data, message data)`` of the messages made since ``since_ms``."""
    if not path.is_file():
        return []
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=2.0)) as db:
            row = db.execute(_SESSION, (str(workdir),)).fetchone()
            if row is None:
                return []
            rows = db.execute(_SINCE, (row[0], since_ms))
            return [(str(m), p or "{}", str(d)) for m, p, d in rows]
    except sqlite3.Error:
        return []


def _obj(data: str) -> dict[str, t.Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def user_prompts(path: pathlib.Path, workdir: pathlib.Path, since_ms: int) -> list[str]:
    """The text of each user message of ``workdir``'s session created since ``since_ms``.

    Text parts opencode added itself (``synthetic``) are left out.
    """
    texts: dict[str, list[str]] = {}
    for message_id, part_data, message_data in _since(path, workdir, since_ms):
        message, part = _obj(message_data), _obj(part_data)
        if message.get("role") != "user" or part.get("type") != "text":
            continue
        if part.get("synthetic") is True or not isinstance(part.get("text"), str):
            continue
        texts.setdefault(message_id, []).append(part["text"])
    return ["\n".join(parts) for parts in texts.values()]


def turn_over(path: pathlib.Path, workdir: pathlib.Path, since_ms: int) -> str | None:
    """How the session's turn ended, if its last message since ``since_ms`` ends it.

    It does when the last message is the assistant's, complete (``time.completed``), and
    not one that asked for tools (``finish: "tool-calls"``, after which opencode runs them
    and asks the model again).
    """
    last: dict[str, t.Any] = {}
    for _id, _part, message_data in _since(path, workdir, since_ms):
        last = _obj(message_data)
    when = last.get("time")
    if last.get("role") != "assistant" or not isinstance(when, dict):
        return None
    finish = last.get("finish")
    if when.get("completed") is None or finish in (None, "tool-calls", "unknown"):
        return None
    return f"assistant message complete (finish: {finish})"
