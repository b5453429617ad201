"""The one start path: an agent's program checked, its hook receipts set up, its terminal opened.

:func:`launch` is what every start shares: :meth:`Host.launch` opens a tmux window (or
respawns an agent's old pane) with it, and :func:`start` (``AgentDriver.start``) a PTY when
no host is given, then builds the agent's driver and waits until it is ready. A
configured agent of a session is started with its :func:`agent_profile` and what
:func:`prepare_launch` adds to its command and :func:`agent_env`: who and where it is, no
tmux handle, and ``poli mcp`` when its ``[agents.X] mcp`` asks for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import typing as t

from politerm.agents.profile import load_profile
from politerm.driver.receipts import launch_with_hooks
from politerm.errors import AgentNotFound, ConfigError, HookError
from politerm.hooks.channel import hooks_dir_for
from politerm.hooks.mcp import MCP_CLIS, mcp_cli, register_mcp
from politerm.project import ENV_AGENT, ENV_CONFIG, PROJECT_ENV
from politerm.pty.runner import PtyTerminal
from politerm.tmux.pane import hide_tmux

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from politerm.agents.approval import ApprovalPolicy
    from politerm.agents.profile import AgentProfile
    from politerm.config import AgentConfig, Config
    from politerm.driver.agent import AgentDriver
    from politerm.driver.host import Host
    from politerm.driver.limits import LimitPolicy
    from politerm.driver.receipts import Receipts
    from politerm.driver.tokens import Budget
    from politerm.store import RunStore
    from politerm.terminal import Terminal

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


async def start(
    cls: type[AgentDriver],
    name: str,
    profile: AgentProfile,
    *,
    argv: Sequence[str] | None = None,
    host: Host | None = None,
    window: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    setting: str | None = None,
    ready_timeout: float | None = 60.0,
    size: tuple[int, int] | None = None,
    say: Callable[[str], None] | None = None,
    hooks: bool = True,
    hooks_dir: pathlib.Path | None = None,
    store: RunStore | None = None,
    policy: ApprovalPolicy | None = None,
    approval_key: str | None = None,
    receipts: Receipts | None = None,
    limits: LimitPolicy | None = None,
    budget: Budget | None = None,
) -> AgentDriver:
    """Start an agent in a new tmux window of ``host`` or a PTY, and wait until ready.

    ``AgentDriver.start``: ``cls`` is the driver class.

    Parameters
    ----------
    argv
        The command (default: the profile's ``command``).
    host, window, size
        The session to open its window in (:meth:`Host.launch`: ``window`` defaults to
        its name in lower case); None runs the agent in a headless PTY (``size``
        default 200x50).
    setting
        The configuration key naming the command, for the "not on PATH" message
        (default ``agents.<name>.command``).
    ready_timeout
        Bound on the wait for the ready prompt; None does not wait.
    hooks, hooks_dir
        Install the CLI's receipt hooks (claude, gemini, codex, aider, opencode),
        reporting to a channel in ``hooks_dir`` (the session's private hooks directory;
        default a fresh private temporary one). A channel that cannot be made leaves
        the screen alone to decide, with a warning.
    store, policy, approval_key, receipts, limits, budget
        As for the constructor.

    Raises
    ------
    AgentNotFound
        The program is not on PATH (nothing was created).
    AgentExited, AgentTimeout
        It exited or was not ready in time; it has been killed.
    """
    argv = list(argv if argv is not None else profile.command)
    full_env = {**profile.env, **(env or {})}
    check_program(argv, full_env, setting=setting or f"agents.{name}.command", cwd=cwd)
    # The store's [redact] patterns go to the hook and its receipts.
    own = store.redactor.extra if store is not None else ()
    launched: Launched[Terminal]
    if host is not None:
        launched = await host.launch(
            name,
            profile.name,
            argv,
            cwd=cwd,
            env=full_env,
            hooks_dir=hooks_dir,
            hooks=hooks,
            patterns=own,
            window=window,
            size=size,
            say=say,
        )
    else:

        async def spawn(argv: list[str], env: dict[str, str]) -> Terminal:
            return await PtyTerminal.spawn(
                argv, cwd=cwd, env=env, size=size or (200, 50), name=name
            )

        launched = await launch(
            name,
            profile.name,
            argv,
            env=full_env,
            hooks_dir=hooks_dir,
            spawn=spawn,
            hooks=hooks,
            patterns=own,
            say=say,
        )
    if receipts is not None and launched.receipts is not None:
        await launched.receipts.close()  # the caller's own reader stands in for it
    where = pathlib.Path(cwd).expanduser().resolve() if cwd is not None else None
    driver = cls(
        name,
        profile,
        launched.term,
        store=store,
        policy=policy,
        approval_key=approval_key,
        cwd=where,
        env=env,
        receipts=receipts or launched.receipts,
        limits=limits,
        budget=budget,
    )
    if ready_timeout is None:
        return driver
    try:
        await driver.wait_ready(ready_timeout, say=say)
    except BaseException:
        # A half-started agent is not left behind.
        with contextlib.suppress(Exception):
            await driver.kill(grace=1.0)
        raise
    return driver


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


def agent_profile(cfg: AgentConfig) -> AgentProfile:
    """The profile of a configured agent, sharpened by its ``ready_regex`` if it has one."""
    profile = load_profile(cfg.profile or "generic")
    if cfg.ready_regex:
        detectors = profile.detectors.model_copy(
            update={"ready": [*profile.detectors.ready, cfg.ready_regex]}
        )
        profile = profile.model_copy(update={"detectors": detectors})
    return profile


def agent_env(name: str, acfg: AgentConfig, profile: AgentProfile) -> dict[str, str]:
    """The environment of a session agent: its profile's, its own history file's, its own.

    Every driver of the agent uses it too, so that they read the history file it writes.
    """
    cwd = pathlib.Path(acfg.cwd).expanduser().resolve()
    return {**profile.env, **profile.history_env(name, cwd), **acfg.env}


def identity_env(config: Config, name: str, config_file: pathlib.Path | None) -> dict[str, str]:
    """The variables that tell a process in an agent's pane who and where it is.

    That is how ``poli reply``, ``poli send`` and ``poli mcp`` inside its pane know who they
    are and which store to use.

    Examples
    --------
    >>> from politerm.config import Config
    >>> sorted(identity_env(Config(), "W1", None))
    ['POLI_AGENT', 'POLI_PROJECT', 'POLI_TMUX_SESSION', 'POLI_TMUX_SOCKET']
    """
    # the project too: an agent's directory may lie outside it (a worktree), and the
    # project names the session's default store
    env = {
        ENV_AGENT: name,
        PROJECT_ENV: str(config.project.root),
        "POLI_TMUX_SOCKET": config.tmux.socket,
        "POLI_TMUX_SESSION": config.tmux.session,
    }
    if config_file is not None:
        env[ENV_CONFIG] = str(config_file)
    return env


def prepare_launch(
    config: Config,
    name: str,
    profile_name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    mcp: bool = False,
    config_file: pathlib.Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment to start session agent ``name`` with.

    Its :func:`identity_env` is added; tmux's own ``TMUX`` and ``TMUX_PANE`` are removed
    (``env -u``), so a plain ``tmux`` in its pane talks to the user's default server and
    agents reach each other through politerm, not by typing into each other's panes (a
    guard against accidents, not a sandbox: docs/messaging.md). With ``mcp`` its CLI's
    session configuration registers ``poli mcp`` (:mod:`politerm.hooks.mcp`).

    Raises
    ------
    ConfigError
        ``mcp`` is asked for an agent whose CLI cannot load MCP servers.
    """
    ident = identity_env(config, name, config_file)
    out_argv, out_env = list(argv), {**env, **ident}
    if mcp:
        cli = mcp_cli(profile_name, argv)
        if cli is None:
            msg = (
                f"agents.{name}.mcp: profile {profile_name!r} cannot load MCP servers "
                f"(only {', '.join(sorted(MCP_CLIS))} can)"
            )
            raise ConfigError(msg)
        out_argv, out_env = register_mcp(cli, out_argv, out_env, hooks_dir_for(config), name, ident)
    return hide_tmux(out_argv), out_env
