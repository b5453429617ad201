"""``poli import FILE``: records from ``poli export --jsonl`` or obi's JSONL results log."""

from __future__ import annotations

import json
import pathlib
import typing as t

import click

from politerm.cli._common import config_option, load
from politerm.cli._epic import epic_store
from politerm.compat.obi import is_ledger_entry, ledger_records
from politerm.epic.records import parse_lines


def _is_obi(lines: list[str]) -> bool:
    first = next((ln for ln in lines if ln.strip()), "")
    try:
        data = json.loads(first)
    except ValueError:
        return False
    return isinstance(data, dict) and is_ledger_entry(data)


@click.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "poli", "obi"]),
    default="auto",
    show_default=True,
    help="poli: `poli export --jsonl`; obi: obi's results log; auto: by the first line.",
)
@config_option
def command(file: t.TextIO, fmt: str, config_path: pathlib.Path | None) -> None:
    """Import session records from FILE ('-': stdin); records already present are skipped."""
    lines = file.readlines()
    if fmt == "obi" or (fmt == "auto" and _is_obi(lines)):
        records = ledger_records(lines, source=file.name)
    else:
        records = parse_lines(lines, source=file.name)
    with epic_store(load(config_path)) as es:
        added, skipped = es.import_records(records)
    click.echo(f"{added} record(s) imported, {skipped} already present")
