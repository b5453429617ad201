"""One-line messages for the errors that come from outside politerm: files and bytes."""

from __future__ import annotations

import errno
import os
import typing as t

from politerm.errors import ConfigError

#: tmux's own limit on a window's width and height.
MAX_COLUMNS = 10000


def describe_os_error(exc: OSError | UnicodeError) -> str:
    """Say what went wrong and where, in one line.

    Examples
    --------
    >>> describe_os_error(FileNotFoundError(2, "No such file or directory", "/x/y"))
    'cannot use /x/y: No such file or directory'
    >>> describe_os_error(IsADirectoryError(21, "Is a directory", "poli.toml"))
    'cannot use poli.toml: it is a directory'
    >>> describe_os_error(UnicodeDecodeError("utf-8", bytes([97, 98, 255]), 2, 3, "bad byte"))
    'input is not valid UTF-8: byte 0xff at offset 2 (bad byte)'
    """
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.start + 1]
        return f"input is not valid UTF-8: byte 0x{bad.hex()} at offset {exc.start} ({exc.reason})"
    if isinstance(exc, UnicodeError):
        return f"text is not valid UTF-8 ({exc})"
    where = exc.filename if exc.filename is not None else "a file"
    if exc.errno == errno.EISDIR:
        why = "it is a directory"
    elif exc.errno == errno.ENOTDIR:
        why = "a part of the path is not a directory"
    else:
        why = exc.strerror or str(exc)
    return f"cannot use {where}: {why}"


def check_width() -> None:
    """Refuse an absurd terminal width (``COLUMNS``) before anything is drawn with it."""
    raw = os.environ.get("COLUMNS")
    if raw is None or raw == "":
        return
    try:
        cols = int(raw)
    except ValueError:
        msg = f"COLUMNS={raw!r} is not a number of columns"
        raise ConfigError(msg) from None
    if not 1 <= cols <= MAX_COLUMNS:
        msg = f"COLUMNS={cols} is not a usable terminal width (1 to {MAX_COLUMNS})"
        raise ConfigError(msg)


def check_arguments(args: list[str]) -> None:
    r"""Refuse a command-line argument that is not valid UTF-8 (bytes the shell passed raw).

    Examples
    --------
    >>> check_arguments(["task", "fine"])
    >>> check_arguments(["task", "ab" + chr(0xDCFF)])
    Traceback (most recent call last):
    ...
    politerm.errors.ConfigError: argument 2 is not valid UTF-8: b'ab\xff'
    """
    for i, arg in enumerate(args, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape")
            msg = f"argument {i} is not valid UTF-8: {raw!r}"
            raise ConfigError(msg) from None


def read_utf8(stream: t.BinaryIO) -> str:
    """Read a whole input file as UTF-8; bytes that are not say which file and where.

    Examples
    --------
    >>> import io
    >>> f = io.BytesIO(bytes([104, 105, 10, 255])); f.name = "body.txt"
    >>> read_utf8(f)
    Traceback (most recent call last):
    ...
    politerm.errors.ConfigError: body.txt: not valid UTF-8 at byte 3 (invalid start byte)
    """
    data = stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        name = getattr(stream, "name", "<stdin>")
        if not isinstance(name, str) or name == "<stdin>":
            name = "standard input"
        msg = f"{name}: not valid UTF-8 at byte {exc.start} ({exc.reason})"
        raise ConfigError(msg) from None
