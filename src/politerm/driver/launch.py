"""The one start path: an agent's program checked, its hook receipts set up, its terminal opened.

:func:`launch` is what every start shares: :meth:`Host.launch` opens a tmux window (or
respawns an agent's old pane) with it, and :meth:`AgentDriver.start` a PTY when no host
is given.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import shutil
import typing as t

from politerm.driver.receipts import launch_with_hooks
from politerm.errors import AgentNotFound, HookError

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from politerm.driver.receipts import Receipts

log = logging.getLogger(__name__)

T = t.TypeVar("T")
T_co = t.TypeVar("T_co", covariant=True)


@dataclasses.dataclass(frozen=True)
class Launched(t.Generic[T_co]):
    """An agent process just started by :func:`launch` (not yet ready)."""

    term: T_co
    #: The command it runs, with the hook arguments its CLI was given.
    argv: list[str]
    #: Its hook receipts from the launch on (None without hooks): pass them to
    #: :func:`~politerm.driver.ready.wait_ready` or the driver.
    receipts: Receipts | None = None
    #: Where its hooks report, ``cli:path``: tagged on its pane so a driver attaching finds it.
    option: str | None = None


async def launch(
    name: str,
    profile: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    hooks_dir: pathlib.Path | None,
    spawn: Callable[[list[str], dict[str, str]], Awaitable[T]],
    hooks: bool = True,
    patterns: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
) -> Launched[T]:
    """Start agent ``name`` with ``spawn(argv, env)``, its CLI's hook receipts installed.

    ``hooks_dir`` is the session's private hooks directory (None: a private temporary
    one, removed with the receipts); ``patterns`` are the project's ``[redact] patterns``,
    for the hook. A channel that cannot be made or read costs only the receipts (the
    screen alone decides), with a warning.
    """
    setup = launch_with_hooks(
        name, profile, argv, env, hooks_dir, enabled=hooks, say=say, patterns=patterns
    )
    receipts = None
    try:
        # Opened before the process runs: what it reports is after the channel's end now
        # (a resumed agent's channel holds its dead predecessor's receipts).
        receipts = setup.receipts(from_start=False)
    except HookError as exc:
        log.warning("%s: its receipts are not read: %s", name, exc)
    term = await spawn(setup.argv, setup.env)
    return Launched(term, setup.argv, receipts, setup.option)


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
