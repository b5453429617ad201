"""Find the tmux binary and make sure it is new enough.

politerm relies on control-mode features and format variables that tmux gained in 3.2, so an
older tmux is treated like a missing one: the error says what to install.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import typing as t
from pathlib import Path

from politerm.errors import TmuxNotFound

if t.TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "INSTALL_HINT",
    "MIN_TMUX_VERSION",
    "check_tmux",
    "find_tmux",
    "format_version",
    "parse_tmux_version",
    "run_bounded",
    "tmux_version",
]

MIN_TMUX_VERSION: tuple[int, int] = (3, 2)
"""Oldest tmux release politerm supports, as ``(major, minor)``."""

INSTALL_HINT = (
    f"install tmux >= {MIN_TMUX_VERSION[0]}.{MIN_TMUX_VERSION[1]} "
    "(apt-get install -y tmux, brew install tmux, dnf install -y tmux)"
)
"""Fix hint shown whenever tmux is missing or too old."""

# Builds from git master report no number at all; they are newer than every release.
_UNRELEASED = 999

_VERSION_RE = re.compile(
    r"^(?:tmux\s+)?(?:(?P<prefix>[A-Za-z]+)-)?(?P<major>\d+)\.(?P<minor>\d+)(?P<suffix>\S*)$"
)


def parse_tmux_version(text: str) -> tuple[int, int, str]:
    r"""Parse the output of ``tmux -V``.

    Parameters
    ----------
    text
        What ``tmux -V`` printed, e.g. ``"tmux 3.3a"``.

    Returns
    -------
    tuple[int, int, str]
        ``(major, minor, suffix)``; the suffix holds the letter of a patch release, ``next``
        for a development build or an ``rc`` marker, and is ``""`` for a plain release.

    Raises
    ------
    ValueError
        When ``text`` does not look like a tmux version.

    Examples
    --------
    >>> parse_tmux_version("tmux 3.3a")
    (3, 3, 'a')
    >>> parse_tmux_version("tmux next-3.4")
    (3, 4, 'next')
    >>> parse_tmux_version("tmux 3.2")
    (3, 2, '')
    >>> parse_tmux_version("tmux 3.2-rc3\n")
    (3, 2, 'rc3')
    >>> parse_tmux_version("tmux 2.9")
    (2, 9, '')
    >>> parse_tmux_version("tmux master")
    (999, 0, 'master')
    >>> parse_tmux_version("bash 5.2")
    Traceback (most recent call last):
    ...
    ValueError: not a tmux version: 'bash 5.2'
    """
    line = text.strip()
    if line in {"tmux master", "master"}:
        return (_UNRELEASED, 0, "master")
    match = _VERSION_RE.match(line)
    if match is None:
        msg = f"not a tmux version: {text.strip()!r}"
        raise ValueError(msg)
    suffix = "-".join(part for part in (match["prefix"] or "", match["suffix"].lstrip("-")) if part)
    return (int(match["major"]), int(match["minor"]), suffix)


def format_version(version: tuple[int, int, str]) -> str:
    """Render a parsed version the way tmux prints it.

    Examples
    --------
    >>> format_version((3, 3, "a"))
    '3.3a'
    >>> format_version((3, 4, "next"))
    'next-3.4'
    >>> format_version((999, 0, "master"))
    'master'
    """
    major, minor, suffix = version
    if major == _UNRELEASED:
        return suffix or "master"
    if suffix.isalpha() and len(suffix) == 1:
        return f"{major}.{minor}{suffix}"
    if suffix.startswith("rc"):
        return f"{major}.{minor}-{suffix}"
    return f"{suffix}-{major}.{minor}" if suffix else f"{major}.{minor}"


def find_tmux(path_env: str | None = None) -> str:
    """Return the absolute path of the tmux binary.

    Parameters
    ----------
    path_env
        A ``PATH``-style search list; ``None`` searches the process's ``PATH``.

    Raises
    ------
    TmuxNotFound
        When no executable ``tmux`` is on the search path.
    """
    found = shutil.which("tmux", path=path_env)
    if found is None:
        msg = f"tmux not found on PATH; {INSTALL_HINT}"
        raise TmuxNotFound(msg)
    return str(Path(found).absolute())


def run_bounded(
    argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a short probe command (``--version`` and the like) with a hard deadline.

    The command runs in its own session so that on timeout its whole process group is
    killed: a wrapper script whose child keeps the output pipe open would otherwise block us
    long after the deadline.

    Parameters
    ----------
    argv
        The command and its arguments.
    timeout
        Seconds before the process group is killed.
    env
        Environment for the command; ``None`` inherits ours.

    Raises
    ------
    subprocess.TimeoutExpired
        When the command did not finish within ``timeout`` (it has been killed).
    OSError
        When the command could not be started.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def tmux_version(binary: str, *, timeout: float = 5.0) -> tuple[int, int, str]:
    """Run ``tmux -V`` and parse its answer.

    Parameters
    ----------
    binary
        Path of the tmux executable.
    timeout
        Seconds to wait for ``tmux -V``.

    Raises
    ------
    TmuxNotFound
        When the binary cannot run, hangs, fails or prints something that is not a version.
    """
    try:
        result = run_bounded([binary, "-V"], timeout)
    except subprocess.TimeoutExpired:
        msg = f"{binary} -V did not answer within {timeout:g}s; {INSTALL_HINT}"
        raise TmuxNotFound(msg) from None
    except OSError as exc:
        msg = f"cannot run {binary}: {exc.strerror or exc}; {INSTALL_HINT}"
        raise TmuxNotFound(msg) from None
    output = (result.stdout or result.stderr).strip()
    if result.returncode != 0:
        msg = f"{binary} -V exited {result.returncode}: {output or 'no output'}; {INSTALL_HINT}"
        raise TmuxNotFound(msg)
    try:
        return parse_tmux_version(output)
    except ValueError as exc:
        msg = f"{binary} -V: {exc}; {INSTALL_HINT}"
        raise TmuxNotFound(msg) from None


def check_tmux(path_env: str | None = None, *, timeout: float = 5.0) -> str:
    """Return the absolute path of a tmux that is at least :data:`MIN_TMUX_VERSION`.

    Parameters
    ----------
    path_env
        A ``PATH``-style search list; ``None`` searches the process's ``PATH``.
    timeout
        Seconds to wait for ``tmux -V``.

    Raises
    ------
    TmuxNotFound
        When tmux is missing, unusable or older than :data:`MIN_TMUX_VERSION`.
    """
    binary = find_tmux(path_env)
    version = tmux_version(binary, timeout=timeout)
    if version[:2] < MIN_TMUX_VERSION:
        msg = f"tmux {format_version(version)} at {binary} is too old; {INSTALL_HINT}"
        raise TmuxNotFound(msg)
    return binary
