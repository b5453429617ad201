"""The project's ``[redact] patterns`` beside a hook channel, for the hook and the driver.

The hook command (:mod:`politerm.hooks.emit`) runs inside the agent's CLI and never reads
``poli.toml``. The launch that makes an agent's channel writes the project's patterns beside
it (:func:`save_patterns`); the hook redacts its receipt with them, and the driver that reads
the receipts matches them with a prompt using the same ones (:func:`channel_redactor`): the
same patterns the run store redacts with.

A file, not an environment variable on the agent's command: everything the agent runs would
see its environment, and a pattern may spell out a literal secret. The file is 0600 in the
channel's 0700 directory and is found from the channel path the hook is already given, so no
variable has to survive each CLI's way of running its hooks (Codex's ``notify``, opencode's
plugin).
"""

from __future__ import annotations

import json
import os
import stat
import typing as t

from politerm.errors import HookError
from politerm.redact import Redactor

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Sequence

_MAX_FILE = 1 << 20  # bytes: a patterns file is a short list


def patterns_path(channel: pathlib.Path) -> pathlib.Path:
    """Where the patterns of ``channel``'s agent are kept.

    Examples
    --------
    >>> import pathlib
    >>> str(patterns_path(pathlib.Path("/run/s/PLANNER.hooks.jsonl")))
    '/run/s/PLANNER.hooks.redact.json'
    """
    return channel.with_name(channel.name.removesuffix(".jsonl") + ".redact.json")


def save_patterns(channel: pathlib.Path, patterns: Sequence[str]) -> None:
    """Keep ``patterns`` beside ``channel`` (0600); with none, remove an older file.

    Raises
    ------
    HookError
        The file cannot be written or removed.
    """
    from politerm._internal.private import write_private

    path = patterns_path(channel)
    try:
        if patterns:
            write_private(path, json.dumps({"patterns": list(patterns)}))
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        msg = f"cannot keep the redact patterns beside {channel}: {exc.strerror or exc}"
        raise HookError(msg) from None


def read_patterns(channel: pathlib.Path) -> list[str]:
    """The patterns kept beside ``channel`` (none when there is no file).

    Raises
    ------
    HookError
        The file is not a private regular file of this user, or not a list of strings.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> channel = pathlib.Path(tempfile.mkdtemp()) / "A.hooks.jsonl"
    >>> read_patterns(channel)
    []
    >>> save_patterns(channel, ["ACME-[0-9]{6}"])
    >>> read_patterns(channel)
    ['ACME-[0-9]{6}']
    """
    path = patterns_path(channel)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return []
    except OSError as exc:
        msg = f"redact patterns {path}: {exc.strerror or exc}"
        raise HookError(msg) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            msg = f"redact patterns {path} is not a private file of this user (want mode 0600)"
            raise HookError(msg)
        raw = os.read(fd, _MAX_FILE + 1)
    except OSError as exc:
        msg = f"redact patterns {path}: {exc.strerror or exc}"
        raise HookError(msg) from None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _MAX_FILE else None
    except ValueError:
        data = None
    patterns = data.get("patterns") if isinstance(data, dict) else None
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        msg = f"redact patterns {path}: not a JSON object with a list of strings"
        raise HookError(msg)
    return patterns


def channel_redactor(channel: pathlib.Path) -> Redactor:
    """The redactor for ``channel``'s receipts: built-in patterns plus the project's.

    Raises
    ------
    HookError
        The patterns file cannot be trusted or read, or a pattern does not compile.
    """
    try:
        return Redactor(read_patterns(channel))
    except ValueError as exc:
        msg = f"redact patterns {patterns_path(channel)}: {exc}"
        raise HookError(msg) from None
