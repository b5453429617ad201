"""Where and what an agent is started with: the tmux place, and the program's PATH check."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import typing as t

from politerm.errors import AgentNotFound

if t.TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from politerm.tmux.control import ControlClient
    from politerm.tmux.server import TmuxServer


@dataclasses.dataclass(frozen=True)
class TmuxPlace:
    """Where :meth:`AgentDriver.start` opens a tmux window: session, window name, size."""

    client: ControlClient
    server: TmuxServer
    session: str
    window: str
    size: tuple[int, int] | None = None


def check_program(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    setting: str,
    cwd: str | os.PathLike[str] | None = None,
) -> None:
    """Raise :class:`AgentNotFound` unless ``argv[0]`` can be run (in ``cwd``, if given).

    ``setting`` names the configuration key that chooses the program, for the message. A
    working directory that is not one is refused here: tmux would silently start the agent
    in another directory, and a PTY's child would fail after the fork.

    Examples
    --------
    >>> check_program(["sh"], None, setting="agents.X.command")
    >>> check_program(["no-such-agent-cli"], None, setting="agents.PLANNER.command")
    Traceback (most recent call last):
    ...
    politerm.errors.AgentNotFound: cannot start 'no-such-agent-cli': not on PATH; install it or set agents.PLANNER.command
    >>> check_program(["sh"], None, setting="agents.X.command", cwd="/no/such/dir")
    Traceback (most recent call last):
    ...
    politerm.errors.AgentNotFound: cannot start 'sh' in /no/such/dir: not a directory; create it or set agents.X.cwd
    """  # noqa: E501
    if not argv:
        msg = f"no command to start: set {setting}"
        raise AgentNotFound(msg)
    path = (env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(argv[0], path=path) is None:
        msg = f"cannot start {argv[0]!r}: not on PATH; install it or set {setting}"
        raise AgentNotFound(msg)
    if cwd is not None and not pathlib.Path(cwd).expanduser().is_dir():
        where = setting.removesuffix(".command") + ".cwd" if setting.endswith(".command") else "cwd"
        msg = f"cannot start {argv[0]!r} in {cwd}: not a directory; create it or set {where}"
        raise AgentNotFound(msg)
