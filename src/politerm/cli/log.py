"""``poli log``: session records (one per session, plus summaries)."""

from __future__ import annotations

import datetime
import json
import pathlib

import click

from politerm.cli._common import config_option, load
from politerm.cli._epic import epic_store


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


@click.command("log")
@click.option("--run", "run_id", metavar="ID", help="Only this run's records.")
@click.option("--epic", help="Only this epic's records.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array).")
@config_option
def command(
    run_id: str | None, epic: str | None, as_json: bool, config_path: pathlib.Path | None
) -> None:
    """Show session records, oldest first."""
    with epic_store(load(config_path)) as es:
        records = es.list_records(run_id=run_id, epic=epic)
        if as_json:
            data = [es.redactor.redact_json(r.to_json()) for r in records]
            click.echo(json.dumps(data, indent=2, ensure_ascii=False))
            return
    if not records:
        click.echo("no session records; `poli go EPIC` records one per session")
        return
    for r in records:
        what = r.item_id or r.kind
        click.echo(
            f"{_when(r.finished or r.started or r.queued)}  {r.run_id or '-':<12} "
            f"{r.epic}/{what:<16} {r.status:<10} {r.commit_summary or r.error or ''}"
        )
        if r.escalation:
            click.echo(f"{'':>34}escalation: {r.escalation}")
        for line in r.drift:
            click.echo(f"{'':>34}drift: {line}")
