"""``poli work``: the built-in work queue (epics, priorities, dependencies)."""

from __future__ import annotations

import json
import pathlib
import typing as t

import click

from politerm._internal.ids import check_id
from politerm.cli._common import config_option, load
from politerm.cli._epic import epic_store
from politerm.cli._errors import read_utf8
from politerm.errors import WorkItemError
from politerm.store.epics import WorkState


@click.group("work")
def command() -> None:
    """Add, list, show and finish work items of the built-in queue."""


@command.command("add")
@click.argument("epic")
@click.argument("title")
@click.option("--body", default="", help="What to do, in detail.")
@click.option("--body-file", type=click.File("rb"), help="Read the body from a file ('-': stdin).")
@click.option("--priority", "-p", type=click.IntRange(0, 4), default=2, show_default=True)
@click.option(
    "--after", "depends_on", multiple=True, metavar="ID", help="Blocked until ID is done."
)
@click.option("--id", "item_id", help="The item's id (default: EPIC-N).")
@click.option("--epic-title", default="", help="Title of the epic (when it is new).")
@config_option
def add(
    epic: str,
    title: str,
    body: str,
    body_file: t.BinaryIO | None,
    priority: int,
    depends_on: tuple[str, ...],
    item_id: str | None,
    epic_title: str,
    config_path: pathlib.Path | None,
) -> None:
    """Add a work item titled TITLE to EPIC."""
    if body_file is not None:
        body = read_utf8(body_file)
    if item_id is not None:
        check_id(item_id, kind="work item id")
    config = load(config_path)
    with epic_store(config) as es:
        if epic_title:
            es.ensure_epic(epic, title=epic_title)
        item = es.add_item(
            epic, title, body=body, priority=priority, depends_on=depends_on, item_id=item_id
        )
    click.echo(item.id)
    from politerm._internal import vault

    if vault.needs_reveal(item.title + item.body) and not vault.served(config.tmux.socket):
        click.echo(
            f"poli: warning: {item.id} holds secrets, stored redacted; its agent gets them only "
            "if the session's tmux server runs until `poli go` (start it with `poli up`)",
            err=True,
        )


@command.command("list")
@click.argument("epic", required=False)
@click.option("--ready", is_flag=True, help="Only items that may start now.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def list_(epic: str | None, ready: bool, as_json: bool, config_path: pathlib.Path | None) -> None:
    """List work items (of EPIC), by priority."""
    with epic_store(load(config_path)) as es:
        if ready:
            if epic is None:
                msg = "--ready needs an EPIC"
                raise click.UsageError(msg)
            items = es.ready_items(epic)
        else:
            items = es.list_items(epic)
    if as_json:
        click.echo(json.dumps([_json(i) for i in items], indent=2))
        return
    if not items:
        which = f"{'ready ' if ready else ''}work items in epic {epic}" if epic else "work items"
        hint = epic or "EPIC"
        click.echo(f'no {which}; add one with `poli work add {hint} "TITLE"`')
        return
    for i in items:
        after = f"  after {', '.join(i.depends_on)}" if i.depends_on else ""
        click.echo(f"{i.id:<20} P{i.priority} {i.state:<11} {i.title}{after}")


@command.command("show")
@click.argument("item_id")
@config_option
def show(item_id: str, config_path: pathlib.Path | None) -> None:
    """Show one work item."""
    with epic_store(load(config_path)) as es:
        item = es.get_item(item_id)
    if item is None:
        msg = f"no work item {item_id!r}"
        raise WorkItemError(msg)
    click.echo(json.dumps(_json(item), indent=2))


@command.command("done")
@click.argument("item_id")
@click.option("--note", help="Why (recorded with the item).")
@config_option
def done(item_id: str, note: str | None, config_path: pathlib.Path | None) -> None:
    """Mark a work item done by hand."""
    with epic_store(load(config_path)) as es:
        item = es.set_item_state(item_id, WorkState.DONE, note=note)
    click.echo(f"{item.id}: {item.state}")


def _json(item: object) -> dict[str, object]:
    import dataclasses

    assert dataclasses.is_dataclass(item) and not isinstance(item, type)
    data = dataclasses.asdict(item)
    data["depends_on"] = list(data["depends_on"])
    return data
