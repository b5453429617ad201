"""Pure helpers for tmux's control-mode wire format."""

from __future__ import annotations

import re

_SAFE_BARE = re.compile(r"^[A-Za-z0-9_@%.,:=/+\-]+$")


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
    """
    if b"\\" not in data:
        return data
    out = bytearray()
    i = 0
    n = len(data)
    while i < n:
        j = data.find(b"\\", i)
        if j < 0:
            out += data[i:]
            break
        out += data[i:j]
        octal = data[j + 1 : j + 4]
        if len(octal) == 3 and all(48 <= c <= 55 for c in octal):
            out.append(int(octal, 8) & 0xFF)
            i = j + 4
        else:
            # Not an escape tmux writes; keep the backslash rather than lose bytes.
            out.append(0x5C)
            i = j + 1
    return bytes(out)


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
    return " ".join(quote(a) for a in args)
