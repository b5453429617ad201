"""``poli import FILE``: add session records from ``poli export --jsonl`` output."""

from __future__ import annotations

import pathlib
import typing as t

import click

from politerm.cli._common import config_option, load
from politerm.cli._epic import epic_store
from politerm.epic.records import parse_lines


@click.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@config_option
def command(file: t.TextIO, config_path: pathlib.Path | None) -> None:
    """Import session records from FILE ('-': stdin); records already present are skipped."""
    records = parse_lines(file, source=file.name)
    with epic_store(load(config_path)) as es:
        added, skipped = es.import_records(records)
    click.echo(f"{added} record(s) imported, {skipped} already present")
