"""What the pipeline commands do: start, resume, abort, answer and show runs.

Each function takes the project directory, loads its configuration (``poli.toml``: socket,
store) and works on the run store; the CLI modules only parse arguments and print.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import shutil
import time
import typing as t

import psutil

from politerm._internal.clock import time_of_day
from politerm._internal.proctree import kill_processes
from politerm.config import load_config
from politerm.driver import Host
from politerm.errors import AgentError, HookError, PipelineError, TmuxError
from politerm.hooks.channel import remove_hooks_dir
from politerm.pipeline import worktrees
from politerm.pipeline.agents import find_pipeline
from politerm.pipeline.model import FINISHED_RUN, Pipeline, RunStatus
from politerm.pipeline.parser import load_pipeline
from politerm.pipeline.runner import PipelineRunner, start_run
from politerm.pipeline.state import (
    RunRecord,
    RunState,
    answer_question,
    latest_run_id,
    project_runs,
    read_question,
    session_name,
    state_path,
    steps_dir,
)
from politerm.store import RunStore

if t.TYPE_CHECKING:
    from politerm.config import Config

Say = t.Callable[[str], None]


def project_dir(project: pathlib.Path | str | None) -> pathlib.Path:
    """The project directory, absolute (default: the current directory)."""
    return pathlib.Path(project or ".").expanduser().resolve()


def open_project(project: pathlib.Path) -> tuple[Config, RunStore]:
    """The project's configuration and run store."""
    config = load_config(project)
    return config, RunStore.for_config(config)


def require_clis(pipeline: Pipeline, cli: str, *, override: bool = False) -> None:
    """Refuse a run at once when a step's CLI is not installed (not when step N starts it).

    Raises
    ------
    PipelineError
        A step's program is not on PATH; the message names the step and ``--cli fake``.
    """
    from politerm.agents.profile import load_profile
    from politerm.driver import check_program
    from politerm.errors import AgentNotFound, ProfileError
    from politerm.pipeline.launch import FAKE, step_cli

    for step in pipeline.steps:
        name = step_cli(step, cli, override=override)
        try:
            profile = load_profile(name) if name != FAKE else None
        except ProfileError:
            continue  # the step's launch says so, naming the step
        if profile is None or not profile.command:
            continue
        try:
            check_program(profile.command, profile.env, setting=f"the {name} profile's command")
        except AgentNotFound as exc:
            msg = (
                f"step {step.num} ({step.agent}) runs {name}: {exc}; or run the pipeline on "
                "another CLI with --cli NAME (--cli fake: the bundled fake agent)"
            )
            raise PipelineError(msg) from None


async def run_new(
    pipeline_ref: str,
    *,
    project: pathlib.Path,
    task: str,
    cli: str,
    run_id: str,
    headless: bool = False,
    unsafe: bool = False,
    use_worktrees: bool = False,
    on_fail: str = "ask",
    say: Say | None = None,
    cli_override: bool = False,
    auto_approve: bool = False,
    agents: t.Sequence[pathlib.Path] = (),
    keep: bool = False,
) -> RunState:
    """Start a new run and drive it to its end (or an interruption).

    ``cli_override`` makes ``cli`` replace every step's CLI column (``meta run --cli``);
    ``auto_approve`` approves gates; ``agents`` are searched first for agent definitions.
    A run that ends (done, failed, aborted) closes its session unless ``keep``; a kept one
    is closed later with :func:`close_run` (``poli down --run-id``).
    """
    from politerm.pipeline.handoff import layout_for
    from politerm.pipeline.runner import FailurePolicy

    FailurePolicy.parse(on_fail)
    pipeline = load_pipeline(find_pipeline(pipeline_ref, project), project, agents=agents)
    require_clis(pipeline, cli, override=cli_override)
    config, store = open_project(project)
    try:
        record = RunRecord(
            run_id=run_id,
            pipeline=str(pipeline.path),
            pipeline_name=pipeline.name,
            project=str(project),
            task=task,
            session=session_name(project, run_id),
            socket=config.tmux.socket,
            cli=cli,
            headless=headless,
            unsafe=unsafe,
            worktrees=use_worktrees,
            on_fail=on_fail,
            cli_override=cli_override,
            auto_approve=auto_approve,
            agents=[str(d.resolve()) for d in agents],
            handoff_dir=layout_for(pipeline.path, config.pipeline.handoff_dir).directory,
        )
        state = start_run(pipeline, record, store)
        await PipelineRunner(pipeline, state, config, say=say).run()
        await _close_if_finished(config, state, keep=keep, say=say)
        return state
    finally:
        store.close()


async def resume_run(
    *,
    project: pathlib.Path,
    run_id: str | None = None,
    say: Say | None = None,
    keep: bool = False,
) -> RunState:
    """Continue a run from its last completed step (latest run by default).

    As with :func:`run_new`, a run that ends closes its session unless ``keep``.

    Raises
    ------
    PipelineError
        No such run, it has finished, or its runner is still alive.
    """
    rid = run_id or latest_run_id(project)
    config, store = open_project(project)
    try:
        state = RunState.load(store, rid)
        rec = state.record
        if rec.status in FINISHED_RUN:
            msg = f"run {rid} has already ended ({rec.status.value})"
            raise PipelineError(msg)
        if rec.pid is not None and _is_runner(rec.pid):
            msg = f"run {rid} is still being run by process {rec.pid}"
            raise PipelineError(msg)
        agents = [pathlib.Path(d) for d in rec.agents]
        pipeline = load_pipeline(rec.pipeline, project, agents=agents)
        state.event("pipeline.resumed", f"resumed by process {os.getpid()}")
        await PipelineRunner(pipeline, state, config, say=say).run()
        await _close_if_finished(config, state, keep=keep, say=say)
        return state
    finally:
        store.close()


def _is_runner(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "politerm" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


async def abort_run(*, project: pathlib.Path, run_id: str | None = None) -> RunState:
    """Stop a run: its runner, every agent's process tree and the session; remove its files.

    ``.poli/steps/<run id>/`` and ``.poli/state.<run id>`` are removed; the run store keeps
    the record (status ``aborted``).
    """
    rid = run_id or latest_run_id(project)
    config, store = open_project(project)
    try:
        state = RunState.load(store, rid)
        rec = state.record
        if rec.status in FINISHED_RUN:
            msg = (
                f"run {rid} has already ended ({rec.status.value}); nothing to abort"
                + ("" if not await _session_up(config, rec) else "; close its session with "
                   f"`poli down --run-id {rid}`")
            )  # fmt: skip
            raise PipelineError(msg)
        if rec.pid is not None and _is_runner(rec.pid):
            # SIGTERM: the runner saves its state and exits (10 s, then SIGKILL).
            runner = [psutil.Process(rec.pid)]
            await asyncio.to_thread(kill_processes, runner, grace=10.0, what="the runner")
        state = RunState.load(store, rid)  # the runner saved its last state on the way out
        rec = state.record
        await _close_session(config, state)
        if rec.worktrees:
            with contextlib.suppress(PipelineError):
                await asyncio.to_thread(worktrees.abort_merge, project)
            await asyncio.to_thread(worktrees.remove_all, project, rid)
        state.clear_question()
        rec.status = RunStatus.ABORTED
        rec.pid = None
        rec.error = "aborted by the user"
        state.save(file=False)
        state.event("pipeline.aborted", "aborted by the user")
        shutil.rmtree(steps_dir(project, rid), ignore_errors=True)
        state_path(project, rid).unlink(missing_ok=True)
        return state
    finally:
        store.close()


async def close_run(*, project: pathlib.Path, run_id: str | None = None) -> RunState:
    """Close the session a finished run kept (``poli run --keep``): agents and windows.

    Raises
    ------
    PipelineError
        The run is still going (abort it instead), or it has no session left.
    """
    rid = run_id or latest_run_id(project)
    config, store = open_project(project)
    try:
        state = RunState.load(store, rid)
        rec = state.record
        if rec.status not in FINISHED_RUN:
            msg = (
                f"run {rid} is {rec.status.value}, not finished; stop it with "
                f"`poli abort --run-id {rid}`"
            )
            raise PipelineError(msg)
        if not await _close_session(config, state):
            msg = f"run {rid} ({rec.status.value}) has no session left to close"
            raise PipelineError(msg)
        return state
    finally:
        store.close()


async def _close_if_finished(
    config: Config, state: RunState, *, keep: bool, say: Say | None
) -> None:
    rec = state.record
    if rec.status not in FINISHED_RUN:
        return  # interrupted or waiting: resume needs the session
    if keep:
        if say is not None:
            say(f"session {rec.session} kept; close it with `poli down --run-id {rec.run_id}`")
        return
    if await _close_session(config, state) and say is not None:
        say(f"session {rec.session} closed")


async def _session_up(config: Config, rec: RunRecord) -> bool:
    host = Host.of(config, rec.session, socket=rec.socket)
    try:
        return await host.up_anywhere()
    except TmuxError:
        return False
    finally:
        await host.close()


async def _close_session(config: Config, state: RunState) -> bool:
    """Stop the run's agents and kill its session; False if it was not there.

    Its steps' hook channels go with it; its last session takes the private server, its
    socket file and config with it.
    """
    rec = state.record
    host = Host.of(config, rec.session, socket=rec.socket)
    try:
        if not await host.up_anywhere():
            return False
        try:
            await host.stop_agents()
        except AgentError as exc:  # a survivor must not keep the session and hooks up
            state.event("pipeline.closed", f"an agent's process outlived SIGKILL: {exc}")
        await host.kill()
    except TmuxError:
        return False  # the server is gone: nothing of the run is left running in it
    finally:
        await host.close()
    try:
        remove_hooks_dir(state.steps_dir / "hooks")
    except HookError as exc:
        state.event("pipeline.hooks", f"hooks directory left: {exc}")
    state.event("pipeline.closed", f"session {rec.session} closed")
    return True


def answer(project: pathlib.Path, run_id: str | None, reply: str, *, by: str) -> dict[str, t.Any]:
    """Answer the open question of a run (latest run waiting for one by default)."""
    _, store = open_project(project)
    try:
        rid = run_id or _waiting_run(store, project)
        RunState.load(store, rid)  # "no such run" before "not waiting"
        return answer_question(store, rid, reply, by=by)
    finally:
        store.close()


def _waiting_run(store: RunStore, project: pathlib.Path) -> str:
    for run in reversed(project_runs(project)):
        rid = run.get("run_id", "")
        q = read_question(store, rid) if rid else None
        if q is not None and q.get("answer") is None:
            return rid
    msg = f"no pipeline run in {project} is waiting for an answer"
    raise PipelineError(msg)


def run_status(
    store: RunStore, project: pathlib.Path, run_id: str | None = None
) -> dict[str, t.Any]:
    """A run's progress as plain data: steps, the open question, recent events."""
    rid = run_id or latest_run_id(project)
    state = RunState.load(store, rid)
    rec = state.record
    pipeline = None
    with contextlib.suppress(PipelineError):
        pipeline = load_pipeline(rec.pipeline, project)
    steps = []
    for num, srec in sorted(rec.steps.items()):
        step = pipeline.step(num) if pipeline is not None else None
        took = (srec.finished or time.time()) - srec.started if srec.started else None
        steps.append(
            {
                "num": num,
                "agent": step.agent if step else "?",
                "gate": step.gate.value if step else "?",
                "group": step.group if step else None,
                "status": srec.status.value,
                "attempt": srec.attempt,
                "seconds": round(took, 1) if took is not None else None,
                "error": srec.error,
                "approved": srec.approved,
            }
        )
    question = read_question(store, rid)
    events = [
        {"ts": e.ts, "kind": e.kind, "step": e.agent, "detail": e.detail}
        for e in store.list_events(limit=400)
        if e.data.get("run") == rid
    ][-12:]
    return {
        "run_id": rid,
        "pipeline": rec.pipeline_name,
        "status": rec.status.value,
        "session": rec.session,
        "socket": rec.socket,
        "task": rec.task,
        "current_step": rec.current_step,
        "error": rec.error,
        "steps": steps,
        "question": question if question and question.get("answer") is None else None,
        "events": events,
    }


def project_status(project: pathlib.Path, run_id: str | None = None) -> list[dict[str, t.Any]]:
    """Progress of one run, or of every run of the project whose state file exists."""
    _, store = open_project(project)
    try:
        if run_id is not None:
            return [run_status(store, project, run_id)]
        out = []
        for run in project_runs(project):
            with contextlib.suppress(PipelineError):
                out.append(run_status(store, project, run.get("run_id", "")))
        return out
    finally:
        store.close()


_MARK = {
    "done": "✔",
    "running": "▶",
    "failed": "✘",
    "skipped": "↷",
    "pending": "·",
}


def format_status(data: dict[str, t.Any]) -> str:
    """A run's progress as text (``poli status``, the control window)."""
    lines = [
        f"run {data['run_id']}  pipeline {data['pipeline']}  [{data['status']}]",
        f"session {data['session']} (tmux -L {data['socket']})",
        f"task: {data['task']}",
        "",
    ]
    for s in data["steps"]:
        took = f"{s['seconds']:.0f}s" if s["seconds"] is not None else ""
        group = f" [{s['group']}]" if s["group"] else ""
        gate = " gate" + (" ✔" if s["approved"] else "") if s["gate"] == "gate" else ""
        attempt = f" attempt {s['attempt']}" if s["attempt"] > 1 else ""
        lines.append(
            f" {_MARK.get(s['status'], '?')} {s['num']:>2} {s['agent']:<16} "
            f"{s['status']:<8}{group}{gate}{attempt} {took}".rstrip()
        )
        if s["error"] and s["status"] in ("failed", "running", "skipped"):
            lines.append(f"      {s['error'][:150]}")
    if data.get("error"):
        lines += ["", f"error: {data['error']}"]
    if data.get("question"):
        q = data["question"]
        lines += ["", f"? step {q['step']}: {q['question']}"]
    if data["events"]:
        lines += ["", "recent:"]
        for e in data["events"][-8:]:
            lines.append(f"  {time_of_day(e['ts'])} {' '.join(e['detail'].split())[:150]}")
    return "\n".join(lines)
