"""``poli export --jsonl``: session records as JSON lines (importable with ``poli import``)."""

from __future__ import annotations

import pathlib

import click

from politerm._internal.private import write_private
from politerm.cli._common import config_option, load
from politerm.cli._epic import epic_store
from politerm.epic.records import export_lines


@click.command("export")
@click.option("--jsonl", "jsonl", is_flag=True, help="JSON lines (the only format; the default).")
@click.option("--run", "run_id", metavar="ID", help="Only this run's records.")
@click.option("--epic", help="Only this epic's records.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    help="Write to this file (mode 0600) instead of stdout.",
)
@config_option
def command(
    jsonl: bool,
    run_id: str | None,
    epic: str | None,
    output: pathlib.Path | None,
    config_path: pathlib.Path | None,
) -> None:
    """Export session records, redacted, one JSON object per line."""
    del jsonl
    with epic_store(load(config_path)) as es:
        lines = list(export_lines(es, run_id=run_id, epic=epic))
    text = "".join(line + "\n" for line in lines)
    if not lines:
        # stdout stays pure JSON lines; the note is for the person at the terminal
        which = " ".join(f"{k} {v}" for k, v in (("run", run_id), ("epic", epic)) if v)
        click.echo(
            f"poli: no session records{' of ' + which if which else ''} to export; "
            "`poli go EPIC` records one per session",
            err=True,
        )
    if output is None:
        click.echo(text, nl=False)
        return
    write_private(output, text)
    click.echo(f"{len(lines)} record(s) written to {output}", err=True)
