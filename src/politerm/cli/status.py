"""``poli status``: agents, tasks, queued messages and recent events; pipeline runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import typing as t

import click

from politerm._internal.lineframe import LineFrame
from politerm._internal.sanitize import color_system, escape_controls, trusted_stdout
from politerm.cli import _complete
from politerm.cli._common import as_view, config_option, load, open_store
from politerm.cli._output import show
from politerm.driver.observer import Observer
from politerm.engine import service
from politerm.engine.placement import here_config, placement
from politerm.errors import ConfigError, FleetError
from politerm.livestatus import all_sessions
from politerm.livestatus import watch as watch_status
from politerm.project import PROJECT_ENV
from politerm.status import collect, merge_fleet, render
from politerm.store import RunStore
from politerm.store.watch import StoreWatch

if t.TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from politerm.config import Config

PIPELINE_BACKSTOP = 5.0
"""Longest the pipeline view sleeps without a store commit."""


def _pipelines(project: pathlib.Path, run_id: str | None) -> list[dict[str, object]]:
    from politerm.pipeline.ops import project_status

    return project_status(project, run_id)


def _pipeline_text(runs: list[dict[str, object]]) -> str:
    from politerm.pipeline.ops import format_status

    return "\n\n".join(format_status(r) for r in runs) or "no pipeline runs"


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--watch", is_flag=True, help="Refresh the table live until Ctrl-C.")
@click.option("--project", type=click.Path(exists=True, file_okay=False, path_type=pathlib.Path),
              help="Show this project (default: the current one).")  # fmt: skip
@click.option(
    "--run-id",
    shell_complete=_complete.run_ids,
    help="Show this pipeline run only.",
)
@click.option("--all", "all_projects", is_flag=True,
              help="List every project's sessions with their directories and agents.")  # fmt: skip
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=pathlib.Path),
              help="Read this run store instead of the configured one.")  # fmt: skip
@click.option("--socket", hidden=True, help="The tmux socket the agents run on.")
@config_option
def command(
    socket: str | None,
    as_json: bool,
    watch: bool,
    project: pathlib.Path | None,
    run_id: str | None,
    all_projects: bool,
    store_path: pathlib.Path | None,
    config_path: pathlib.Path | None,
) -> None:
    """Show agents, tasks (with questions to answer), queued messages and recent events.

    Of the current project (the directory holding poli.toml, else the git root, else here),
    or of --project; its pipeline runs are shown too when it has any. With --run-id, show
    that pipeline run only; with --all, every project's sessions.
    """
    from politerm.pipeline.state import project_runs

    if project is not None:
        os.environ[PROJECT_ENV] = str(project.resolve())
    if run_id is not None:
        root = (project or pathlib.Path.cwd()).resolve()
        _show_pipelines(root, run_id, as_json=as_json, watch=watch)
        return
    config = load(config_path)
    if all_projects:
        _show_all(Observer.of(config), as_json=as_json)
        return
    here = config.project.root
    with_runs = bool(project_runs(here))
    if socket:
        config = config.model_copy(
            update={"tmux": config.tmux.model_copy(update={"socket": socket})}
        )
    observer = Observer.of(config)
    if store_path is not None and not store_path.exists():
        # Looking must not create: a mistyped path is an error, not a new empty store.
        msg = f"--store {store_path}: no run store there"
        raise ConfigError(msg)
    lock = service.ServiceLock.of(config)
    board_error: list[str] = []

    def read_once(store: RunStore) -> dict[str, t.Any]:
        data = collect(store, **asyncio.run(_live_once(store, observer)))
        if config.fleet is None:
            return data
        from politerm.engine.fleetboard import read_fleet

        try:
            board, asks = read_fleet(config, store)
        except FleetError as exc:
            board_error.append(str(exc))  # this machine's agents are still shown
            board, asks = [], []
        return merge_fleet(data, board, config.fleet.node, here_config(config)[1], asks)

    def with_router(data: dict[str, t.Any]) -> dict[str, t.Any]:
        info = lock.read()
        data["router"] = None
        if info is not None:
            data["router"] = {
                "pid": info.pid,
                "router": info.router,
                "restarts": info.restarts,
                "started": info.started,
                "uptime": service.uptime_text(info.uptime),
            }
        if config.fleet is not None:
            node = service.ServiceLock.of(config, service.NODE).read()
            data["fleet"] = {
                "node": config.fleet.node,
                "service": None if node is None else {"pid": node.pid, "child": node.router},
                "placement": placement(config),
                "board_error": board_error[-1] if board_error else None,
            }
        return data

    with RunStore.open(store_path) if store_path else open_store(config) as store:
        if as_json:
            data = with_router(read_once(store))
            if with_runs:
                data["pipelines"] = _pipelines(here, None)
            click.echo(json.dumps(data, indent=2, default=str))
            return
        from rich.console import Console, Group
        from rich.text import Text

        def view(data: dict[str, t.Any], max_agents: int | None = None) -> Group:
            parts = [render(with_router(data), max_agents=max_agents)]
            if with_runs:
                parts.append(Text("\npipeline runs", style="bold"))
                parts.append(Text(escape_controls(_pipeline_text(_pipelines(here, None)))))
            return Group(*parts)

        if not watch:
            show(view(read_once(store)))
            return
        console = Console(highlight=False, color_system=color_system())
        if console.is_terminal and not console.is_dumb_terminal:
            with trusted_stdout():
                _watch_in_terminal(console, store, observer, view, config)
            return
        from rich.live import Live

        # Not a terminal: the live view prints its last frame when it stops.
        with trusted_stdout(), Live(console=console, screen=False, auto_refresh=False) as live_view:

            def draw(data: dict[str, t.Any]) -> None:
                live_view.update(view(data, max(3, console.height - 6)), refresh=True)

            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_watch(store, observer, draw, config))


def _watch_in_terminal(
    console: Console,
    store: RunStore,
    observer: Observer,
    view: t.Callable[[dict[str, t.Any], int | None], RenderableType],
    config: Config,
) -> None:
    """Redraw on every change, writing only the lines that changed (:class:`LineFrame`).

    The watcher runs in a tmux window beside the agents: each byte it prints is tmux work
    (see docs/performance.md), and a redraw mostly repeats the agents table.
    """
    frame = LineFrame(console.file, height=console.height)
    width = console.width

    def draw(data: dict[str, t.Any]) -> None:
        nonlocal width
        if console.width != width:
            width = console.width
            frame.clear()  # the terminal reflowed the old lines
        frame.resize(console.height)
        # Rows below the screen are not drawn at all (the frame cuts to its height).
        with console.capture() as captured:
            console.print(view(data, max(3, console.height - 6)))
        frame.draw(captured.get().rstrip("\n").split("\n"))

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_watch(store, observer, draw, config))
    finally:
        frame.close()


def _show_all(observer: Observer, *, as_json: bool) -> None:
    async def read() -> list[dict[str, t.Any]]:
        async with observer:
            return await all_sessions(observer)

    sessions = asyncio.run(read())
    if as_json:
        click.echo(json.dumps({"sessions": sessions}, indent=2))
        return
    if not sessions:
        click.echo(f"no politerm sessions on socket {observer.socket!r}")
        return
    from rich.table import Table

    table = Table(title=f"sessions on socket {observer.socket}", expand=True)
    for col in ("session", "project", "windows", "attached", "agents"):
        table.add_column(col, overflow="fold")
    for ses in sessions:
        agents = ", ".join(f"{n} {st}" for n, st in sorted(ses["agents"].items())) or "-"
        table.add_row(
            ses["session"],
            escape_controls(ses["project"] or "?"),
            str(ses["windows"]),
            "yes" if ses["attached"] else "no",
            agents,
        )
    show(table)


async def _live_once(store: RunStore, observer: Observer) -> dict[str, t.Any]:
    """``collect``'s ``live`` and ``resets`` arguments, from the agents' observer."""
    async with observer:
        states = await observer.states(store.list_agents())
        return {"live": states, "resets": observer.resets}


async def _watch(
    store: RunStore,
    observer: Observer,
    draw: t.Callable[[dict[str, t.Any]], None],
    config: Config,
) -> None:
    as_view()
    async with observer:
        if config.fleet is None:
            await watch_status(store, observer, draw, collect=collect)
            return
        from politerm.engine.fleetboard import BoardFeed, open_board

        node, elsewhere = config.fleet.node, here_config(config)[1]
        queue, board = open_board(config, store)
        # The fleet's agents redraw when their nodes publish a change (or a node is lost).
        async with BoardFeed(board, config.fleet.heartbeat) as feed:

            def with_board(*args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
                return merge_fleet(
                    collect(*args, **kwargs), feed.snapshot(), node, elsewhere, feed.asked()
                )

            await watch_status(store, observer, draw, collect=with_board, also=feed.event)
        queue.conn.close()


def _show_pipelines(root: pathlib.Path, run_id: str | None, *, as_json: bool, watch: bool) -> None:
    if as_json:
        click.echo(json.dumps({"pipelines": _pipelines(root, run_id)}, indent=2, default=str))
        return
    if not watch:
        click.echo(_pipeline_text(_pipelines(root, run_id)))
        return
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from politerm.config import load_config

    store_path = load_config(root).store.resolved_path()
    with (
        trusted_stdout(),
        Live(console=Console(color_system=color_system()), auto_refresh=False) as live,
    ):

        async def follow() -> None:
            async with StoreWatch(store_path) as sw:
                while True:
                    changed = sw.event()
                    live.update(
                        Text(escape_controls(_pipeline_text(_pipelines(root, run_id)))),
                        refresh=True,
                    )
                    # Step state files are written beside the store's commits; the bound
                    # covers a run whose runner died without a last commit.
                    await sw.wait(PIPELINE_BACKSTOP, event=changed)

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(follow())
