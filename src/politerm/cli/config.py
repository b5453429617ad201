"""``poli config``: print the effective configuration and the files it came from."""

from __future__ import annotations

import json
from pathlib import Path

import click

from politerm.config import load_config


@click.command("config")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read this file instead of ./poli.toml.",
)
def command(config_path: Path | None) -> None:
    """Print the effective configuration as JSON (files, then environment, applied)."""
    config = load_config(config_path=config_path)
    document = {
        "sources": [str(path) for path in config.sources],
        **config.model_dump(mode="json"),
    }
    click.echo(json.dumps(document, indent=2))
