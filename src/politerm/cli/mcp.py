"""``poli mcp``: serve the messaging tools to an agent over stdio (Model Context Protocol)."""

from __future__ import annotations

import asyncio
import pathlib

import click

from politerm.cli._common import config_option
from politerm.cli._messaging import config_path_of, load_messaging


@click.command("mcp")
@config_option
def command(config_path: pathlib.Path | None) -> None:
    """Run the MCP server on stdin/stdout (agent CLIs start it; see docs/messaging.md)."""
    from politerm.messaging.mcp_server import serve_stdio

    path = config_path_of(config_path)
    asyncio.run(serve_stdio(load_messaging(path), path))
