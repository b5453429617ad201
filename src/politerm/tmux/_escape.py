"""Pure helpers for tmux's control-mode wire format."""

from __future__ import annotations

import functools
import re

_SAFE_BARE = re.compile(r"^[A-Za-z0-9_@%.,:=/+\-]+$")
# Every three-digit octal escape of a %output payload, and the byte it stands for.
_OCTAL = {f"{n:03o}".encode(): bytes([n & 0xFF]) for n in range(0o1000)}


def decode_output(data: bytes) -> bytes:
    r"""Decode the payload of a ``%output`` line.

    tmux writes bytes below 32 and the backslash as a backslash and three octal digits;
    every other byte is sent as it is.

    Examples
    --------
    >>> decode_output(rb"echo hi\015\012")
    b'echo hi\r\n'
    >>> decode_output(rb"a\134b \033[1m")
    b'a\\b \x1b[1m'
    >>> decode_output("❯ é".encode())
    b'\xe2\x9d\xaf \xc3\xa9'
    >>> decode_output(rb"a\9\12\0331")  # not escapes: those backslashes stay
    b'a\\9\\12\x1b1'
    """
    if b"\\" not in data:
        return data
    first, *rest = data.split(b"\\")
    out = [first]
    for part in rest:
        byte = _OCTAL.get(part[:3])
        if byte is None:
            # Not an escape tmux writes; keep the backslash rather than lose bytes.
            out += (b"\\", part)
        else:
            out += (byte, part[3:])
    return b"".join(out)


def quote(arg: str) -> str:
    r"""Quote one argument for a tmux command line sent over control mode.

    Message text never travels this way (it goes through ``load-buffer``); this is for
    names, paths, formats and commands. A newline cannot be sent on a control-mode line.

    Examples
    --------
    >>> quote("%3")
    '%3'
    >>> quote("a b")
    "'a b'"
    >>> quote("it's $HOME")
    '"it\'s \\$HOME"'
    >>> quote("")
    "''"
    """
    if "\n" in arg or "\r" in arg:
        msg = f"a tmux command argument cannot hold a newline: {arg[:40]!r}"
        raise ValueError(msg)
    if _SAFE_BARE.match(arg) and not arg.startswith("~"):
        return arg
    if "'" not in arg:
        return f"'{arg}'"
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def command_line(args: tuple[str, ...] | list[str]) -> str:
    """Join a command and its arguments into one control-mode line.

    Examples
    --------
    >>> command_line(["display-message", "-p", "#{pane_id} x"])
    "display-message -p '#{pane_id} x'"
    """
    if not args:
        msg = "empty tmux command"
        raise ValueError(msg)
    return _joined(tuple(args))


@functools.lru_cache(maxsize=512)
def _joined(args: tuple[str, ...]) -> str:
    # The same few commands (a pane's look, its keys) go out again and again.
    return " ".join(quote(a) for a in args)
