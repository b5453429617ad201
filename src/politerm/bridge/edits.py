r"""File modifications applied exactly: byte-exact outside the change, newlines preserved.

A file is split on ``\n`` only (``str.splitlines`` would also split on form feeds, ``\x1c``
and U+2028, changing bytes nobody asked to change); each line keeps its own terminator, so
a CRLF file stays CRLF and a missing final newline stays missing. Inserted text takes the
file's newline style. Every modification of a task is computed in memory first (see
:func:`plan_edits`): a task whose third edit is impossible changes no file at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import typing as t

from politerm._internal.private import write_private
from politerm.bridge.models import FileAction, FileModificationInstruction
from politerm.errors import EditError

if t.TYPE_CHECKING:
    from collections.abc import Sequence


def split_lines(text: str) -> list[str]:
    r"""Split after each ``\n``, keeping terminators; a final unterminated line is kept too.

    Examples
    --------
    >>> split_lines("a\r\nb\nc")
    ['a\r\n', 'b\n', 'c']
    >>> split_lines("a\x0cb\n")
    ['a\x0cb\n']
    >>> split_lines("")
    []
    """
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def newline_of(text: str) -> str:
    r"""The file's newline: that of its first terminated line (``\n`` if it has none).

    Examples
    --------
    >>> newline_of("x\r\ny\r\n"), newline_of("x\ny"), newline_of("")
    ('\r\n', '\n', '\n')
    """
    i = text.find("\n")
    return "\r\n" if i > 0 and text[i - 1] == "\r" else "\n"


def as_lines(content: str, newline: str) -> str:
    r"""``content`` as whole lines in the file's newline style (a final newline is added).

    Examples
    --------
    >>> as_lines("a\nb", "\r\n")
    'a\r\nb\r\n'
    >>> as_lines("a\r\n", "\n")
    'a\n'
    >>> as_lines("", "\n")
    ''
    """
    if not content:
        return ""
    body = content.replace("\r\n", "\n").replace("\n", newline)
    return body if body.endswith(newline) else body + newline


def _marker_lines(lines: list[str], mod: FileModificationInstruction, label: str) -> list[int]:
    marker = mod.line_marker or ""
    hits = [i for i, line in enumerate(lines) if marker in line]
    if not hits:
        msg = f"{label}: no line contains the marker {marker!r}"
        raise EditError(msg)
    if mod.marker_occurrence == "all":
        return hits
    n = mod.marker_occurrence
    if n > len(hits):
        msg = f"{label}: the marker {marker!r} appears {len(hits)} time(s), not {n}"
        raise EditError(msg)
    return [hits[n - 1]]


def _check_range(lines: list[str], mod: FileModificationInstruction, label: str) -> tuple[int, int]:
    start, end = mod.start_line_number or 0, mod.end_line_number or 0
    if end > len(lines):
        msg = f"{label}: bad line range {start}-{end}: the file has {len(lines)} line(s)"
        raise EditError(msg)
    return start - 1, end


def apply_to_text(text: str | None, mod: FileModificationInstruction, label: str) -> str:
    r"""The file's new text after ``mod``; ``text`` is None when the file does not exist.

    Raises
    ------
    EditError
        The modification cannot apply (missing file or marker, bad range), saying where.

    Examples
    --------
    >>> m = FileModificationInstruction(
    ...     file_path="f", action="insert_after_line", line_marker="b", content="NEW"
    ... )
    >>> apply_to_text("a\r\nb\r\nc", m, "f")
    'a\r\nb\r\nNEW\r\nc'
    >>> apply_to_text(None, m, "f")
    Traceback (most recent call last):
    ...
    politerm.errors.EditError: f: insert_after_line into a file that does not exist
    >>> a = FileModificationInstruction(file_path="f", action="append_content", content="\nz")
    >>> apply_to_text("y", a, "f")
    'y\nz'
    """
    action = mod.action
    if action is FileAction.CREATE_FILE:  # created, or overwritten, as in the original
        return mod.content or ""
    if text is None:
        if action in (FileAction.REPLACE_CONTENT, FileAction.APPEND_CONTENT) and (
            mod.create_if_missing
        ):
            text = ""
        else:
            hint = (
                " (set create_if_missing to create it)"
                if action in (FileAction.REPLACE_CONTENT, FileAction.APPEND_CONTENT)
                else ""
            )
            msg = f"{label}: {action.value} into a file that does not exist{hint}"
            raise EditError(msg)
    if action is FileAction.REPLACE_CONTENT:
        return mod.content or ""
    nl = newline_of(text)
    lines = split_lines(text)
    if action is FileAction.APPEND_CONTENT:
        body = (mod.content or "").replace("\r\n", "\n").replace("\n", nl)
        # A separating newline only when neither side has one: the original's tasks append
        # "\nmore" to files without a final newline and mean one line break, not two.
        sep = nl if text and not text.endswith("\n") and not body.startswith(nl) else ""
        return text + sep + body
    if action in (FileAction.INSERT_BEFORE_LINE, FileAction.INSERT_AFTER_LINE):
        new = as_lines(mod.content or "", nl)
        targets = set(_marker_lines(lines, mod, label))
        out: list[str] = []
        for i, line in enumerate(lines):
            if action is FileAction.INSERT_BEFORE_LINE and i in targets:
                out.append(new)
            if action is FileAction.INSERT_AFTER_LINE and i in targets:
                last = i == len(lines) - 1
                if last and not line.endswith("\n"):
                    # Keep the file's missing final newline: it moves to after the insert.
                    out.append(line + nl + new.removesuffix(nl))
                    continue
                out.append(line + new)
                continue
            out.append(line)
        return "".join(out)
    start, end = _check_range(lines, mod, label)
    replacement = ""
    if action is FileAction.REPLACE_LINES:
        replacement = as_lines(mod.new_lines_text or "", nl)
        if end == len(lines) and not lines[-1].endswith("\n"):
            replacement = replacement.removesuffix(nl)
    elif end == len(lines) and start > 0 and not lines[-1].endswith("\n"):
        # Deleting the unterminated last line(s): the line before becomes the last one and
        # loses its terminator, so the file keeps having no final newline.
        lines[start - 1] = lines[start - 1].removesuffix("\n").removesuffix("\r")
    return "".join([*lines[:start], replacement, *lines[end:]])


def sha256_of(data: bytes | None) -> str | None:
    """Hex sha256 of ``data`` (None stays None: the file is absent).

    Examples
    --------
    >>> sha256_of(b"")[:12], sha256_of(None)
    ('e3b0c44298fc', None)
    """
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_file(path: pathlib.Path) -> bytes | None:
    """The file's bytes, or None if it does not exist.

    Raises
    ------
    EditError
        It exists but cannot be read, or is not a regular file.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        msg = f"{path}: is a directory, not a file"
        raise EditError(msg) from None
    except ValueError as e:  # a NUL byte in the name: no such file can exist
        msg = f"{str(path)!r}: not a valid file name ({e})"
        raise EditError(msg) from None
    except OSError as e:
        msg = f"{path}: cannot read: {e.strerror or e}"
        raise EditError(msg) from e


def decode_utf8(data: bytes, path: pathlib.Path) -> str:
    r"""Decode strictly; a bad byte is reported with its offset.

    Examples
    --------
    >>> decode_utf8(b"ok\xff", pathlib.Path("f.txt"))
    Traceback (most recent call last):
    ...
    politerm.errors.EditError: f.txt: not valid UTF-8 (byte 0xff at offset 2)
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"{path}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})"
        raise EditError(msg) from None


@dataclasses.dataclass(frozen=True)
class PlannedFile:
    """One file's content before and after all of a task's modifications."""

    path: pathlib.Path
    before: bytes | None
    after: bytes

    @property
    def before_sha256(self) -> str | None:
        """sha256 of the file as it was (None: it did not exist)."""
        return sha256_of(self.before)

    @property
    def after_sha256(self) -> str:
        """sha256 the file must have once the task is done."""
        return hashlib.sha256(self.after).hexdigest()


def resolve(base_dir: pathlib.Path, file_path: str) -> pathlib.Path:
    """An instruction's path, relative ones taken from ``base_dir``."""
    p = pathlib.Path(file_path).expanduser()
    return p if p.is_absolute() else base_dir / p


def plan_edits(
    mods: Sequence[FileModificationInstruction], base_dir: pathlib.Path
) -> list[PlannedFile]:
    """Compute every file's new bytes without writing anything (mods apply in order).

    Raises
    ------
    EditError
        The first modification that cannot apply, naming its position and file.
    """
    current: dict[pathlib.Path, tuple[bytes | None, str | None]] = {}
    for i, mod in enumerate(mods):
        path = resolve(base_dir, mod.file_path)
        label = f"file_modifications[{i}] {path}"
        if path not in current:
            before = read_file(path)
            current[path] = (before, None if before is None else decode_utf8(before, path))
        before, text = current[path]
        current[path] = (before, apply_to_text(text, mod, label))
    return [
        PlannedFile(path, before, (text or "").encode("utf-8"))
        for path, (before, text) in current.items()
    ]


def write_planned(planned: Sequence[PlannedFile]) -> list[pathlib.Path]:
    """Write each changed file atomically, keeping an existing file's permissions.

    Returns
    -------
    list[pathlib.Path]
        The files whose bytes changed.
    """
    changed: list[pathlib.Path] = []
    for p in planned:
        if p.before == p.after:
            continue
        try:
            mode = p.path.stat().st_mode & 0o7777 if p.before is not None else 0o600
            # A created file may name a new folder: made 0700.
            write_private(p.path, p.after, mode=mode, sync=True)
        except OSError as e:
            msg = f"{p.path}: cannot write: {e.strerror or e}"
            raise EditError(msg) from e
        changed.append(p.path)
    return changed


def file_state(path: pathlib.Path) -> str | None:
    """sha256 of the file now (None: absent) — the evidence a settle step compares."""
    try:
        return sha256_of(path.read_bytes())
    except (FileNotFoundError, ValueError):  # ValueError: a NUL in the name, so absent
        return None
    except OSError as e:
        msg = f"{path}: cannot read: {e.strerror or os.strerror(e.errno or 0)}"
        raise EditError(msg) from e
