"""Register ``poli mcp`` as an MCP server in an agent CLI's configuration for this session only.

Like the receipt hooks (:mod:`politerm.hooks.install`), nothing is written to the user's
own configuration: Claude Code gets ``--mcp-config <file>``, Codex ``-c mcp_servers.…``
overrides, Gemini CLI a session home (``GEMINI_CLI_HOME``), opencode ``OPENCODE_CONFIG``;
their files are 0600 in the session's private hooks directory, removed with it.
"""

from __future__ import annotations

import json
import sys
import typing as t

from politerm._internal.private import write_private
from politerm.errors import ConfigError
from politerm.hooks.install import GEMINI_HOME_ENV, gemini_home

if t.TYPE_CHECKING:
    import pathlib

SERVER_NAME: t.Final = "poli"
"""The name politerm's MCP server is registered under (its tools are ``mcp__poli__…``)."""

MCP_CLIS: t.Final = frozenset({"claude", "codex", "gemini", "opencode"})
"""Agent CLIs whose session configuration politerm can register its MCP server in."""

GEMINI_MCP_TIMEOUT_MS = 600_000


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


def register_mcp(
    cli: str,
    argv: t.Sequence[str],
    env: t.Mapping[str, str],
    directory: pathlib.Path,
    name: str,
    server_env: t.Mapping[str, str],
) -> tuple[list[str], dict[str, str]]:
    """``argv`` and ``env`` of ``cli`` with ``poli mcp`` registered in its session config.

    ``directory`` is the session's private hooks directory; ``server_env`` what the
    server is started with (the agent's identity).

    Raises
    ------
    ConfigError
        ``cli`` cannot load MCP servers.
    """
    command = server_command()
    out_argv, out_env = list(argv), dict(env)
    spec: dict[str, t.Any]
    if cli not in MCP_CLIS:
        msg = f"cannot register an MCP server for {cli!r}"
        raise ConfigError(msg)
    if cli == "claude":
        spec = {
            "mcpServers": {
                SERVER_NAME: {"command": command[0], "args": command[1:], "env": dict(server_env)}
            }
        }
        path = directory / f"mcp-{name}.claude.json"
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
        home = gemini_home(directory / f"mcp-{name}.jsonl", env, settings)
        out_env[GEMINI_HOME_ENV] = str(home)
    else:
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
        path = directory / f"mcp-{name}.opencode.json"
        write_private(path, json.dumps(spec, indent=1))
        out_env["OPENCODE_CONFIG"] = str(path)
    return out_argv, out_env


def _toml_table(values: t.Mapping[str, str]) -> str:
    """An inline TOML table of strings.

    Examples
    --------
    >>> print(_toml_table({"A": "1", "B": "two"}))
    {A = "1", B = "two"}
    """
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items()) + "}"
