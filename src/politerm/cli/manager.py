"""``poli manager``: the dev manager's console, and its one-shot commands for scripts.

Exit codes of ``goal``, ``input`` and ``resume``: 0 the task is complete, 3 the manager asks a
question (answer with ``poli manager input``; Ctrl-C stops the current step and asks what
now), 4 the task was stopped, 1 it failed (the error state says what failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import typing as t

import click

from politerm.cli._common import config_option, load, open_store

if t.TYPE_CHECKING:
    from collections.abc import Iterator

    from politerm.config import Config
    from politerm.manager.engine import Manager
    from politerm.manager.store import ManagerStore, Project

EXIT_COMPLETE: t.Final = 0
EXIT_FAILED: t.Final = 1
EXIT_QUESTION: t.Final = 3
EXIT_STOPPED: t.Final = 4


def _exit_code(project: Project) -> int:
    from politerm.manager.states import ManagerState

    if project.state is ManagerState.TASK_COMPLETE:
        return EXIT_COMPLETE
    if project.state is ManagerState.PAUSED_WAITING_USER_INPUT:
        return EXIT_QUESTION
    if project.state.is_error:
        return EXIT_FAILED
    return EXIT_STOPPED


def _printer(as_json: bool) -> t.Callable[[Project, str], None]:
    def show(project: Project, line: str) -> None:
        if not as_json:
            click.echo(f"[{project.name}] {line}", err=True)

    return show


keep_agents_option = click.option(
    "--keep-agents",
    is_flag=True,
    help="Leave the brain and dev agents running when the task ends (poli down stops them).",
)


def _others_running(config: Config, manager: Manager, name: str) -> bool:
    """Whether another manager process drives a project (and so may use the brain agent)."""
    from politerm.manager.app import ProjectLock

    path = config.store.resolved_path()
    others = [p.name for p in manager.store.list_projects() if p.name != name]
    return any(ProjectLock(path, other).holder() is not None for other in others)


def _drive(
    config: Config,
    name: str,
    begin: t.Callable[[Manager], object],
    as_json: bool,
    keep_agents: bool = False,
) -> None:
    from politerm.manager.app import ProjectLock, build_manager, run_interruptible
    from politerm.manager.pane import close_sessions
    from politerm.redact import install_log_redaction

    manager = build_manager(config, on_event=_printer(as_json))
    install_log_redaction(manager.store.redactor)  # SDK debug logs could quote the key

    async def go() -> Project:
        try:
            project = await run_interruptible(manager, name)
        finally:
            await manager.aclose()
        if not keep_agents and _exit_code(project) != EXIT_QUESTION:
            # The task ended: its agents go with it (a question keeps them for the answer).
            ended = [name] if _others_running(config, manager, name) else [name, "brain"]
            for what in await close_sessions(config, ended):
                _printer(as_json)(project, f"stopped {what}")
        return project

    try:
        with ProjectLock(config.store.resolved_path(), name):
            begin(manager)
            project = asyncio.run(go())
    finally:
        manager.store.store.close()
    _report(project, as_json)
    raise SystemExit(_exit_code(project))


def _report(project: Project, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(project.to_json(), indent=2))
        return
    from politerm.manager.repl import status_lines

    for line in status_lines(project):
        click.echo(line)


@click.group("manager", invoke_without_command=True)
@config_option
@click.pass_context
def command(ctx: click.Context, config_path: pathlib.Path | None) -> None:
    """The dev manager: an LLM plans, a dev agent works, until the goal is met.

    Without a subcommand, open the interactive console.
    """
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    if ctx.invoked_subcommand is not None:
        return
    from politerm.manager.app import ProjectLock, build_manager
    from politerm.manager.repl import Repl
    from politerm.redact import install_log_redaction

    config = load(config_path)
    manager = build_manager(config, on_event=_printer(False), lazy=True)
    install_log_redaction(manager.store.redactor)  # SDK debug logs could quote the key
    store_path = config.store.resolved_path()
    repl = Repl(
        manager,
        lambda name: ProjectLock(store_path, name),
        history=store_path.parent / "manager_history",
    )
    try:
        code = asyncio.run(repl.run())
    finally:
        manager.store.store.close()
    ctx.exit(code)


def _config(ctx: click.Context) -> Config:
    return load(ctx.obj.get("config_path") if ctx.obj else None)


@contextlib.contextmanager
def _store(config: Config) -> Iterator[ManagerStore]:
    """The manager tables of the project's run store, closed after the block."""
    from politerm.manager.store import ManagerStore
    from politerm.redact import Redactor

    with open_store(config) as store:
        yield ManagerStore(store, Redactor(config.redact.patterns))


@command.command("goal")
@click.option("--project", "name", required=True, help="The manager project.")
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="Print the project as JSON at the end.")
@keep_agents_option
@click.pass_context
def goal(ctx: click.Context, name: str, text: str, as_json: bool, keep_agents: bool) -> None:
    """Run a task toward TEXT to completion or to a question (exit 0, 3; 1 failed).

    When the task ends (not at a question) its brain and dev agents are stopped, unless
    --keep-agents.
    """
    _drive(_config(ctx), name, lambda m: m.start(name, text), as_json, keep_agents)


@command.command("input")
@click.option("--project", "name", required=True, help="The manager project.")
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="Print the project as JSON at the end.")
@keep_agents_option
@click.pass_context
def input_(ctx: click.Context, name: str, text: str, as_json: bool, keep_agents: bool) -> None:
    """Answer the manager's question with TEXT and go on (exit codes as goal)."""
    _drive(_config(ctx), name, lambda m: m.answer(name, text), as_json, keep_agents)


@command.command("resume")
@click.option("--project", "name", required=True, help="The manager project.")
@click.option("--json", "as_json", is_flag=True, help="Print the project as JSON at the end.")
@keep_agents_option
@click.pass_context
def resume(ctx: click.Context, name: str, as_json: bool, keep_agents: bool) -> None:
    """Go on with a task a crashed or killed manager left (exit codes as goal)."""
    _drive(_config(ctx), name, lambda m: m.store.project(name), as_json, keep_agents)


@command.command("stop")
@click.option("--project", "name", required=True, help="The manager project.")
@click.pass_context
def stop(ctx: click.Context, name: str) -> None:
    """Stop the project's task (it is not offered for resumption any more)."""
    from politerm.manager.app import ProjectLock
    from politerm.manager.engine import stop_task

    config = _config(ctx)
    with _store(config) as store, ProjectLock(config.store.resolved_path(), name):
        project = stop_task(store, name)
    click.echo(f"{name}: {project.state.value}")


@command.command("status")
@click.option("--project", "name", default=None, help="Only this project.")
@click.option("--json", "as_json", is_flag=True, help="JSON: a list of projects.")
@click.pass_context
def status(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Where every manager project (or one) stands."""
    from politerm.manager.repl import status_lines

    with _store(_config(ctx)) as store:
        projects = [store.project(name)] if name else store.list_projects()
        selected = store.selected()
    if as_json:
        out = {
            "selected": selected.name if selected else None,
            "projects": [p.to_json() for p in projects],
        }
        click.echo(json.dumps(out, indent=2))
        return
    if not projects:
        click.echo("no manager projects; add one with `poli manager project add NAME PATH`")
    for project in projects:
        click.echo("\n".join(status_lines(project)))


@command.group("project")
def project() -> None:
    """Register and list manager projects."""


@project.command("add")
@click.argument("name")
@click.argument("path", type=click.Path(file_okay=False, path_type=pathlib.Path))
@click.option("--goal", default="", help="The project's overall goal.")
@click.option("--channel", type=click.Choice(["pane", "file"]), default=None)
@click.option("--agent", default="", help="The dev agent's profile (pane channel).")
@click.pass_context
def project_add(
    ctx: click.Context,
    name: str,
    path: pathlib.Path,
    goal: str,
    channel: str | None,
    agent: str,
) -> None:
    """Register project NAME at PATH."""
    config = _config(ctx)
    with _store(config) as store:
        p = store.add_project(
            name, path, goal=goal, channel=channel or config.manager.channel, agent=agent
        )
    click.echo(f"project {p.name} added ({p.path}, {p.channel} channel)")


@project.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def project_list(ctx: click.Context, as_json: bool) -> None:
    """The projects and their states."""
    with _store(_config(ctx)) as store:
        projects = store.list_projects()
    if as_json:
        click.echo(json.dumps([p.to_json() for p in projects], indent=2))
        return
    if not projects:
        click.echo("no manager projects; add one with `poli manager project add NAME PATH`")
    for p in projects:
        click.echo(f"{p.name:<16} {p.state.value:<26} {p.channel:<5} {p.path}")
