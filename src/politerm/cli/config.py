"""``poli config``: the effective configuration; ``import-obi`` takes over an obi.toml."""

from __future__ import annotations

import json
from pathlib import Path

import click

from politerm._internal.private import write_private
from politerm.cli._common import config_option
from politerm.compat.obi import convert_config, write_prompts
from politerm.config import load_config
from politerm.errors import CompatError, ConfigError
from politerm.preflight import problems


@click.group("config", invoke_without_command=True)
@config_option
@click.pass_context
def command(ctx: click.Context, config_path: Path | None) -> None:
    """Print the effective configuration as JSON (files, then environment, applied)."""
    if ctx.invoked_subcommand is not None:
        return
    config = load_config(config_path=config_path)
    found = problems(config)
    if found:
        for problem in found[:-1]:
            click.echo(f"poli: {problem}", err=True)
        raise ConfigError(found[-1])
    document = {
        "sources": [str(path) for path in config.sources],
        **config.model_dump(mode="json"),
    }
    click.echo(json.dumps(document, indent=2))


@command.command("import-obi")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write poli.toml here (refused if it exists, unless --force); default: stdout.",
)
@click.option(
    "--prompts-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".poli/prompts"),
    show_default=True,
    help="Where obi's prompt strings are written as files.",
)
@click.option("--force", is_flag=True, help="Overwrite --output.")
def import_obi(file: Path, output: Path | None, prompts_dir: Path, force: bool) -> None:
    """Turn obi.toml FILE (codex binary and flags, prompts, results log) into poli.toml."""
    converted = convert_config(
        file.read_text(encoding="utf-8"), source=str(file), prompts_dir=str(prompts_dir)
    )
    if output is not None and output.exists() and not force:
        msg = f"{output} exists; pass --force to overwrite it"
        raise CompatError(msg)
    for path in write_prompts(converted, prompts_dir):
        click.echo(f"wrote {path}", err=True)
    if output is None:
        click.echo(converted.toml, nl=False)
        return
    write_private(output, converted.toml)
    click.echo(f"wrote {output}", err=True)
