"""What an agent started by politerm sees: its identity, no tmux handle, its MCP server.

Every agent gets ``POLI_AGENT`` (its name), ``POLI_PROJECT``, ``POLI_TMUX_SOCKET``,
``POLI_TMUX_SESSION`` and, when the session has a configuration file, ``POLI_CONFIG`` —
that is how ``poli reply``,
``poli send`` and ``poli mcp`` inside its pane know who they are and which store to use.
tmux's own ``TMUX`` and ``TMUX_PANE`` are removed from its environment (the command runs
under ``env -u TMUX -u TMUX_PANE``): a plain ``tmux`` command in an agent's pane then talks
to the user's default server, not to politerm's private one, so agents reach each other
through politerm (the store, confirmed delivery, the busy check) rather than by typing into
each other's panes. This is a guard against accidents, not a sandbox: a process of the same
user that names the private socket can still reach it (see docs/messaging.md).

With ``[agents.X] mcp = true`` the agent's own session configuration registers ``poli mcp``
as an MCP server: Claude Code through ``--mcp-config``, Codex through ``-c mcp_servers.…``
overrides, Gemini CLI through a session home (``GEMINI_CLI_HOME``), opencode through
``OPENCODE_CONFIG``. Files politerm writes for this live in the session's private message
directory.
"""

from __future__ import annotations

import json
import sys
import typing as t

from politerm._internal.private import write_private
from politerm.driver.host import hide_tmux
from politerm.errors import ConfigError
from politerm.hooks.install import GEMINI_HOME_ENV, gemini_home
from politerm.messaging.files import MessageDir, message_dir_for
from politerm.messaging.mcp_server import SERVER_NAME
from politerm.messaging.service import ENV_AGENT, ENV_CONFIG
from politerm.project import PROJECT_ENV

if t.TYPE_CHECKING:
    import pathlib

    from politerm.config import Config

MCP_CLIS: t.Final = frozenset({"claude", "codex", "gemini", "opencode"})
"""Agent CLIs whose session configuration politerm can register its MCP server in."""


def agent_env(config: Config, name: str, config_file: pathlib.Path | None) -> dict[str, str]:
    """The variables that tell a process in an agent's pane who and where it is.

    Examples
    --------
    >>> from politerm.config import Config
    >>> sorted(agent_env(Config(), "W1", None))
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


def session_config_file(config: Config) -> pathlib.Path | None:
    """The project configuration file the session was loaded from (not the user file)."""
    return config.project_file


def server_command() -> list[str]:
    """How an agent CLI starts ``poli mcp`` (this Python, so the same politerm)."""
    return [sys.executable, "-m", "politerm", "mcp"]


def mcp_cli(profile_name: str, argv: t.Sequence[str]) -> str | None:
    """Which MCP-capable CLI an agent runs: by profile name, else by program name.

    Examples
    --------
    >>> mcp_cli("claude", ["/opt/bin/claude"]), mcp_cli("generic", ["/x/codex", "-a"])
    ('claude', 'codex')
    >>> mcp_cli("fake-claude", ["python", "-m", "politerm.testing.fakeagent"]) is None
    True
    """
    if profile_name in MCP_CLIS:
        return profile_name
    program = argv[0].rsplit("/", 1)[-1] if argv else ""
    return program if program in MCP_CLIS else None


GEMINI_MCP_TIMEOUT_MS = 600_000


def register_mcp(
    cli: str,
    argv: t.Sequence[str],
    env: t.Mapping[str, str],
    directory: MessageDir,
    name: str,
    server_env: t.Mapping[str, str],
) -> tuple[list[str], dict[str, str]]:
    """``argv`` and ``env`` of ``cli`` with ``poli mcp`` registered in its session config."""
    command = server_command()
    out_argv, out_env = list(argv), dict(env)
    spec: dict[str, t.Any]
    if cli == "claude":
        spec = {
            "mcpServers": {
                SERVER_NAME: {"command": command[0], "args": command[1:], "env": dict(server_env)}
            }
        }
        path = directory.file(f"mcp-{name}.claude.json")
        write_private(path, json.dumps(spec, indent=1))
        # politerm's own tools are allowed up front; the agent's other tools keep their policy
        out_argv += ["--mcp-config", str(path), "--allowedTools", f"mcp__{SERVER_NAME}"]
        # the mcp SDK alone takes ~2 s to import on a busy machine; Claude's default is short
        out_env.setdefault("MCP_TIMEOUT", "60000")
    elif cli == "codex":
        key = f"mcp_servers.{SERVER_NAME}"
        out_argv += [
            "-c",
            f"{key}.command={json.dumps(command[0])}",
            "-c",
            f"{key}.args={json.dumps(command[1:])}",
            "-c",
            f"{key}.env={_toml_table(server_env)}",
        ]
    elif cli == "gemini":
        # Gemini reads a system settings file only when root owns every folder above it:
        # its home moves instead, to one whose settings are the user's own plus the server
        # (the same overlay the receipt hooks use, and they stack on it).
        server = {"command": command[0], "args": command[1:], "env": dict(server_env)}
        # ``timeout`` is Gemini's own default for calls (10 min), stated so that its
        # ``mcp list`` waits as long: unstated, that check gives the server 5 s to start, and
        # the mcp SDK's import alone takes longer on a busy machine ("Disconnected").
        settings = {
            "mcpServers": {SERVER_NAME: {**server, "trust": True, "timeout": GEMINI_MCP_TIMEOUT_MS}}
        }
        home = gemini_home(directory.file(f"mcp-{name}.jsonl"), env, settings)
        out_env[GEMINI_HOME_ENV] = str(home)
    elif cli == "opencode":
        spec = {
            "$schema": "https://opencode.ai/config.json",
            "mcp": {
                SERVER_NAME: {
                    "type": "local",
                    "command": command,
                    "environment": dict(server_env),
                    "enabled": True,
                }
            },
        }
        path = directory.file(f"mcp-{name}.opencode.json")
        write_private(path, json.dumps(spec, indent=1))
        out_env["OPENCODE_CONFIG"] = str(path)
    else:
        msg = f"cannot register an MCP server for {cli!r}"
        raise ConfigError(msg)
    return out_argv, out_env


def _toml_table(values: t.Mapping[str, str]) -> str:
    """An inline TOML table of strings.

    Examples
    --------
    >>> print(_toml_table({"A": "1", "B": "two"}))
    {A = "1", B = "two"}
    """
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items()) + "}"


def prepare_launch(
    config: Config,
    name: str,
    profile_name: str,
    argv: t.Sequence[str],
    env: t.Mapping[str, str],
    *,
    mcp: bool = False,
    config_file: pathlib.Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment to start agent ``name`` with (see the module doc).

    Raises
    ------
    ConfigError
        ``mcp`` is asked for an agent whose CLI cannot load MCP servers.
    """
    ident = agent_env(config, name, config_file)
    out_argv, out_env = list(argv), {**env, **ident}
    if mcp:
        cli = mcp_cli(profile_name, argv)
        if cli is None:
            msg = (
                f"agents.{name}.mcp: profile {profile_name!r} cannot load MCP servers "
                f"(only {', '.join(sorted(MCP_CLIS))} can)"
            )
            raise ConfigError(msg)
        out_argv, out_env = register_mcp(
            cli, out_argv, out_env, MessageDir(message_dir_for(config)), name, ident
        )
    return hide_tmux(out_argv), out_env
