"""``poli bridge``: the typed task queue, its bridge daemon and the command runner."""

from __future__ import annotations

import json
import pathlib
import sys
import time
import typing as t

import click

from politerm._internal.sanitize import escape_controls
from politerm.cli._common import config_option, load, open_store

if t.TYPE_CHECKING:
    from politerm.bridge.queue import TaskQueue
    from politerm.redact import Redactor

queue_option = click.option(
    "--queue",
    "queue_opt",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    help="The queue file (default: $POLI_BRIDGE_QUEUE, else the project's "
    ".poli/bridge/task_queue.json).",
)


def _safe(text: object) -> str:
    """Task text with control sequences shown, never acted on by the terminal."""
    return escape_controls(str(text))


def _warn(line: str) -> None:
    click.echo(f"poli: {_safe(line)}", err=True)


def _redactor(config_path: pathlib.Path | None) -> Redactor:
    from politerm.redact import Redactor

    return Redactor(load(config_path).redact.patterns)


def _queue(queue_opt: pathlib.Path | None) -> TaskQueue:
    from politerm.bridge.daemon import queue_path
    from politerm.bridge.queue import TaskQueue
    from politerm.project import find_project

    path = queue_path(queue_opt, find_project().root)
    return TaskQueue(path, on_repair=lambda r: _warn("warning: " + r.describe()))


@click.group("bridge")
def command() -> None:
    """A typed task queue that other programs fill, executed by politerm or an agent."""


@command.command("start")
@queue_option
@click.option(
    "--executor",
    default="builtin",
    show_default=True,
    help="'builtin' (politerm applies edits and runs commands) or 'agent:NAME'.",
)
@click.option(
    "--report",
    type=click.Choice(["block", "fenced"]),
    default="block",
    show_default=True,
    help="How an agent reports: a tagged done/failed block, or a ```poli:<id> report.",
)
@click.option(
    "--base-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    help="Relative paths of tasks start here (default: the project directory).",
)
@click.option("--daemon", is_flag=True, help="Run in the background (pid file beside the queue).")
@click.option("--once", is_flag=True, help="Handle what is queued now, then exit.")
@config_option
def start(
    queue_opt: pathlib.Path | None,
    executor: str,
    report: str,
    base_dir: pathlib.Path | None,
    daemon: bool,
    once: bool,
    config_path: pathlib.Path | None,
) -> None:
    """Serve the queue: prepare, hand over, verify, archive and prune its tasks."""
    from politerm.bridge.daemon import log_path, make_executor, serve, start_daemon

    queue = _queue(queue_opt)
    from politerm.project import find_project

    base = (base_dir or find_project().root).absolute()
    if daemon:
        argv = ["--queue", str(queue.path), "--executor", executor, "--report", report]
        argv += ["--base-dir", str(base)]
        if config_path is not None:
            argv += ["--config", str(config_path.absolute())]
        pid = start_daemon(argv, queue)
        click.echo(f"bridge {pid} serving {queue.path} (log: {log_path(queue)})")
        return
    config = load(config_path)
    chosen = make_executor(executor, config, report=report)

    def say(line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        click.echo(f"{stamp} {_safe(line)}", err=True)

    with open_store(config) as store:
        done = serve(
            queue,
            chosen,
            store,
            base_dir=base,
            redact_patterns=config.redact.patterns,
            once=once,
            log=say,
        )
    for task_id, status in done:
        click.echo(f"{_safe(task_id)} {status}")


@command.command("stop")
@queue_option
def stop(queue_opt: pathlib.Path | None) -> None:
    """Stop the bridge serving the queue (SIGTERM, then wait until it is gone)."""
    from politerm.bridge.daemon import stop_daemon

    queue = _queue(queue_opt)
    pid = stop_daemon(queue)
    click.echo(f"bridge {pid} stopped" if pid else f"no bridge serves {queue.path}")


@command.command("submit")
@click.argument("source", type=click.File("r"))
@queue_option
def submit(source: t.TextIO, queue_opt: pathlib.Path | None) -> None:
    """Add the task(s) in SOURCE ('-': stdin): one task, a list, or {"tasks": [...]}.

    Each task is validated first (its shape: actions, parameters, ids); a bad one is
    refused with one line and nothing is added. What depends on the files (a marker, a
    range, a folder) is checked by the bridge when it takes the task.
    """
    from politerm.bridge.models import parse_task
    from politerm.errors import BridgeTaskInvalid

    name = getattr(source, "name", "-")
    try:
        data = json.loads(source.read())
    except ValueError as e:
        msg = f"{name}: not JSON: {e}"
        raise BridgeTaskInvalid(msg) from None
    tasks = data.get("tasks", [data]) if isinstance(data, dict) else data
    if not isinstance(tasks, list):
        msg = f"{name}: expected a task object, a list of tasks or {{'tasks': [...]}}"
        raise BridgeTaskInvalid(msg)
    for raw in tasks:
        if isinstance(raw, dict) and isinstance(raw.get("task_id"), str):
            parse_task({**raw, "status": "pending"})  # the queue checks task_id itself
    for task_id in _queue(queue_opt).submit(tasks):
        click.echo(_safe(task_id))


def _row(raw: dict[str, t.Any]) -> dict[str, t.Any]:
    aad = raw.get("agent_action_details") or {}
    return {
        "task_id": raw.get("task_id"),
        "status": raw.get("status"),
        "tool": aad.get("tool_to_call") if isinstance(aad, dict) else None,
        "executor": aad.get("executor") if isinstance(aad, dict) else None,
        "error": raw.get("error"),
    }


@command.command("list")
@queue_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@config_option
def list_(queue_opt: pathlib.Path | None, as_json: bool, config_path: pathlib.Path | None) -> None:
    """The tasks in the queue and where each stands."""
    redactor = _redactor(config_path)
    queue = _queue(queue_opt)
    rows = [redactor.redact_json(_row(raw)) for raw in queue.read()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"queue is empty; add tasks with `poli bridge submit FILE` ({queue.path})")
        return
    for r in rows:
        extra = f"  {r['tool']} via {r['executor']}" if r["tool"] else ""
        err = f"  error: {r['error']}" if r["error"] else ""
        click.echo(_safe(f"{r['task_id']:<24} {r['status']:<22}{extra}{err}"))


@command.command("show")
@click.argument("task_id")
@queue_option
@config_option
def show(task_id: str, queue_opt: pathlib.Path | None, config_path: pathlib.Path | None) -> None:
    """The task as JSON: from the queue, else from the archive, with its log."""
    from politerm.bridge.archive import find_archived
    from politerm.bridge.queue import find
    from politerm.errors import BridgeTaskInvalid

    queue = _queue(queue_opt)
    raw = find(queue.read(), task_id) or find_archived(queue.root, task_id)
    if raw is None:
        msg = f"task {task_id}: not in {queue.path} nor in its archive"
        raise BridgeTaskInvalid(msg)
    shown = _redactor(config_path).redact_json(raw)
    click.echo(_safe(json.dumps(shown, indent=2, ensure_ascii=False)))
    folder = pathlib.Path(raw.get("archive") or queue.root / "work" / task_id)
    log = folder / "task.log"
    if log.is_file():
        click.echo("--- task.log")
        click.echo(_safe(log.read_text(errors="replace")).rstrip("\n"))


@command.command("report")
@click.argument("task_id")
@click.option(
    "--status",
    type=click.Choice(["processing_by_agent", "completed_by_agent", "failed_by_agent"]),
    required=True,
    help="How the task went (processing_by_agent: started, optional).",
)
@click.option("--message", default="", help="What was done.")
@click.option("--error", "error_text", default=None, help="Why it failed.")
@queue_option
def report(
    task_id: str,
    status: str,
    message: str,
    error_text: str | None,
    queue_opt: pathlib.Path | None,
) -> None:
    """Report a handed-over task as done or failed (agents call this)."""
    from politerm.bridge.report import report_task

    report_task(_queue(queue_opt), task_id, status, message=message, error=error_text)
    click.echo(f"{_safe(task_id)} {status}")


@command.command("schema")
@click.argument("model", required=False)
def schema(model: str | None) -> None:
    """JSON Schemas of the queue's models (all, or MODEL: Task, QueueFile, ...)."""
    from politerm.bridge.models import json_schemas
    from politerm.errors import BridgeTaskInvalid

    schemas = json_schemas()
    if model is None:
        click.echo(json.dumps(schemas, indent=2))
        return
    if model not in schemas:
        msg = f"no model {model!r}; known: {', '.join(sorted(schemas))}"
        raise BridgeTaskInvalid(msg)
    click.echo(json.dumps(schemas[model], indent=2))


@command.command("run-command", context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--id", "command_id", default="cmd", show_default=True, help="Names its files.")
@click.option("--cwd", type=click.Path(file_okay=False, path_type=pathlib.Path), default=".")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=pathlib.Path), default=".")
@click.option("--launch-timeout", type=float, default=30.0, show_default=True)
@click.option("--activity-timeout", type=float, default=300.0, show_default=True)
@click.option("--total-timeout", type=float, default=3600.0, show_default=True)
@config_option
def run_command(
    argv: tuple[str, ...],
    command_id: str,
    cwd: pathlib.Path,
    out_dir: pathlib.Path,
    launch_timeout: float,
    activity_timeout: float,
    total_timeout: float,
    config_path: pathlib.Path | None,
) -> None:
    """Run a shell command with launch/activity/total timeouts; print its status JSON.

    Exit code: the command's, 124 when a timeout fired, 127 when it could not start.
    """
    import shlex

    from pydantic import ValidationError

    from politerm.bridge.runner import CommandSpec, RunState, run_command
    from politerm.errors import BridgeTaskInvalid

    try:
        spec = CommandSpec(
            command_id=command_id,
            command=argv[0] if len(argv) == 1 else shlex.join(argv),
            working_directory=str(cwd.absolute()),
            launch_timeout=launch_timeout,
            activity_timeout=activity_timeout,
            total_timeout=total_timeout,
            out_dir=str(out_dir.absolute()),
            redact_patterns=load(config_path).redact.patterns,
        )
    except ValidationError as e:
        err = e.errors()[0]
        where = "--id" if err["loc"] == ("command_id",) else ".".join(map(str, err["loc"]))
        msg = f"run-command: {where} {err.get('input')!r}: {err['msg']}"
        raise BridgeTaskInvalid(msg) from None
    status = run_command(spec)
    click.echo(_safe(status.model_dump_json(indent=2)))
    if status.state is RunState.LAUNCH_FAILED:
        sys.exit(127)
    if status.timeout_fired is not None:
        sys.exit(124)
    sys.exit(status.exit_code if status.exit_code is not None else 128 + (status.signal or 0))
