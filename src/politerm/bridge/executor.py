"""Who executes a prepared task, and the built-in executor (politerm itself).

An executor runs a handed-over task as journalled steps (see
:class:`~politerm.store.bridge.BridgeJournal`): step 0 applies every file modification, each
command is one more step. Every step is written ``started`` before it acts. After a crash the
same call settles each step from evidence instead of acting twice:

- file edits: each file's sha256 now is compared with the one before and the one expected
  after; ``after`` → already done, ``before`` → apply now, anything else → the task fails
  (someone else changed the file; writing over it could destroy their work);
- a command: the detached runner's status file says how it ended; a runner still alive is
  waited for; a runner that died mid-command fails the task (running it again could do its
  work twice); a command whose status file was never written never started and runs now.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys
import typing as t

import psutil

from politerm._internal.waits import pid_alive, wait_until
from politerm.bridge.edits import file_state, plan_edits, resolve, write_planned
from politerm.bridge.models import CommandResult, TaskResult, Tool
from politerm.bridge.runner import (
    DRAIN_SECONDS,
    KILL_GRACE,
    CommandSpec,
    CommandStatus,
    RunState,
    read_status,
)
from politerm.errors import BridgeError, EditError
from politerm.store.bridge import StepState
from politerm.store.db import ensure_private_dir

if t.TYPE_CHECKING:
    from politerm.bridge.archive import TaskFiles
    from politerm.bridge.models import AgentActionDetails, CommandExecutionInstruction, Task
    from politerm.store.bridge import BridgeJournal

WAIT_MARGIN: t.Final = 15.0
"""Seconds beyond a command's own timeouts that the bridge waits for its runner."""


@dataclasses.dataclass
class Handoff:
    """A task handed to an executor, with what it needs to run and record it."""

    task: Task
    action: AgentActionDetails
    files: TaskFiles
    journal: BridgeJournal
    base_dir: pathlib.Path
    redact_patterns: tuple[str, ...] = ()
    queue_path: pathlib.Path | None = None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the executor says the task went (the bridge still verifies it)."""

    ok: bool
    result: TaskResult
    error: str | None = None


class Executor(t.Protocol):
    """Runs handed-over tasks: politerm itself, or a politerm agent."""

    name: str

    async def execute(self, handoff: Handoff) -> Outcome:
        """Run (or, after a crash, settle) the task; never raise for a task's own failure."""
        ...

    async def close(self) -> None:
        """Release what the executor holds (agents, sessions)."""
        ...


class BuiltinExecutor:
    """politerm applies the edits and runs the commands itself."""

    name = "builtin"

    async def close(self) -> None:
        """Nothing to release."""

    async def execute(self, handoff: Handoff) -> Outcome:
        """Run every step of the task in order; stop at the first failure."""
        result = TaskResult()
        step = 0
        action = handoff.action
        if action.file_modifications:
            error = self._edits(handoff, step, result)
            if error:
                return Outcome(False, result, error)
            step += 1
        for cmd in action.commands_to_execute:
            status = await self._command(handoff, step, cmd)
            step += 1
            result.commands.append(
                CommandResult(
                    command_id=cmd.command_id,
                    state=status.state.value,
                    exit_code=status.exit_code,
                    timeout_fired=status.timeout_fired.value if status.timeout_fired else None,
                    status_path=str(handoff.files.commands_dir / f"{cmd.command_id}.status.json"),
                )
            )
            handoff.files.log(f"command {status.describe()}")
            if not status.succeeded and not cmd.continue_on_failure:
                return Outcome(False, result, f"command {status.describe()}")
        if action.tool_to_call is Tool.FOLLOW_INSTRUCTION:
            # Only an instruction, no operation: the original completed such a task too.
            result.message = "nothing to run: the task has only an instruction"
        else:
            result.message = "done"
        return Outcome(True, result)

    # --- file edits -----------------------------------------------------------------------

    def _edits(self, h: Handoff, step: int, result: TaskResult) -> str | None:
        tid = h.task.task_id
        action = h.action
        row = h.journal.get(tid, step)
        if row is not None and row.state is not StepState.STARTED:
            result.files_changed = list(row.result.get("files_changed", []))
            return row.result.get("error") if row.state is StepState.FAILED else None
        if row is None:
            h.journal.start(
                tid,
                step,
                "edits",
                {"expected": action.expected_sha256, "original": action.original_sha256},
            )
        try:
            changed = apply_edits_exactly_once(h.action, h.base_dir)
        except EditError as e:
            h.journal.finish(tid, step, StepState.FAILED, {"error": str(e)})
            h.files.log(f"edits failed: {e}")
            return str(e)
        result.files_changed = [str(p) for p in changed]
        h.journal.finish(tid, step, StepState.DONE, {"files_changed": result.files_changed})
        h.files.log("edits applied: " + (", ".join(result.files_changed) or "no change"))
        return None

    # --- commands -------------------------------------------------------------------------

    async def _command(
        self, h: Handoff, step: int, cmd: CommandExecutionInstruction
    ) -> CommandStatus:
        tid = h.task.task_id
        spec = CommandSpec.from_instruction(
            cmd,
            base_dir=h.base_dir,
            out_dir=h.files.commands_dir,
            redact_patterns=h.redact_patterns,
        )
        row = h.journal.get(tid, step)
        if row is not None and row.state is not StepState.STARTED:
            done = read_status(spec.status_path)
            if done is not None and done.state.is_final:
                return done
            return _lost(spec, "finished earlier, but its status file is gone")
        if row is None:
            h.journal.start(
                tid,
                step,
                "command",
                {"command_id": cmd.command_id, "status": str(spec.status_path)},
            )
        runner_pid = await self._adopt_or_spawn(h, spec)
        final = await self._wait(spec, runner_pid)
        state = StepState.DONE if final.succeeded else StepState.FAILED
        h.journal.finish(tid, step, state, {"state": final.state.value, "exit": final.exit_code})
        return final

    async def _adopt_or_spawn(self, h: Handoff, spec: CommandSpec) -> int | None:
        status = read_status(spec.status_path)
        if status is not None:
            h.files.log(
                f"command {spec.command_id}: found its runner's status ({status.state.value})"
            )
            return status.runner_pid
        running = _runner_of(spec.status_path)
        if running is not None:
            return running
        # No status file and no runner: the runner writes its status before it starts the
        # command, so the command never started and may run now.
        ensure_private_dir(h.files.commands_dir)
        err = h.files.commands_dir / f"{spec.command_id}.runner.err"
        with _private_open(err) as fh:
            # The spec (the unredacted command and environment) goes through a pipe, never
            # to disk; the status path on the command line identifies the runner.
            proc = subprocess.Popen(  # noqa: ASYNC220  # fork+exec only; it never waits
                [sys.executable, "-m", "politerm.bridge.runner", "-", str(spec.status_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=fh,
                start_new_session=True,  # outlives the bridge: a restarted bridge adopts it
            )
        await asyncio.to_thread(_feed, proc, spec.model_dump_json().encode())
        h.files.log(f"command {spec.command_id}: runner {proc.pid} started")
        self._children.append(proc)
        return proc.pid

    def __init__(self) -> None:
        self._children: list[subprocess.Popen[bytes]] = []

    async def _wait(self, spec: CommandSpec, runner_pid: int | None) -> CommandStatus:
        bound = spec.launch_timeout + spec.total_timeout + 2 * KILL_GRACE + DRAIN_SECONDS
        bound += WAIT_MARGIN

        def check() -> CommandStatus | None:
            self._reap()
            status = read_status(spec.status_path)
            if status is not None and status.state.is_final:
                return status
            pid = status.runner_pid if status is not None else runner_pid
            if not pid_alive(pid):
                # The runner may have written the final status just before exiting.
                status = read_status(spec.status_path)
                if status is not None and status.state.is_final:
                    return status
                return _lost(spec, f"its runner (pid {pid}) died before the command ended")
            return None

        try:
            return await wait_until(
                check,
                dirs=[pathlib.Path(spec.out_dir)],
                pids=[runner_pid] if runner_pid else [],
                timeout=bound,
                what=f"command {spec.command_id} to end",
                error=BridgeError,
            )
        except BridgeError as e:
            if runner_pid is not None and pid_alive(runner_pid):
                with contextlib.suppress(psutil.Error):
                    psutil.Process(runner_pid).kill()
            return _lost(spec, str(e))

    def _reap(self) -> None:
        self._children = [p for p in self._children if p.poll() is None]


def apply_edits_exactly_once(
    action: AgentActionDetails, base_dir: pathlib.Path
) -> list[pathlib.Path]:
    """Bring every file to its expected content, file by file, judging by what is there.

    A file already at its expected sha256 is left alone; one at its original sha256 gets the
    edits; any other content means someone else changed it and nothing is written.

    Raises
    ------
    EditError
        A file has neither the original nor the expected content, or the edits applied to
        the original do not give the expected content.
    """
    by_path: dict[str, list[int]] = {}
    for i, mod in enumerate(action.file_modifications):
        by_path.setdefault(str(resolve(base_dir, mod.file_path)), []).append(i)
    todo: list[int] = []
    for path, indexes in by_path.items():
        now = file_state(pathlib.Path(path))
        expected = action.expected_sha256.get(path)
        original = action.original_sha256.get(path)
        if now == expected:
            continue
        if now != original:
            msg = f"{path} changed since the task was prepared; not touching it"
            raise EditError(msg)
        todo.extend(indexes)
    planned = plan_edits([action.file_modifications[i] for i in sorted(todo)], base_dir)
    for p in planned:
        if p.after_sha256 != action.expected_sha256.get(str(p.path)):
            msg = f"{p.path}: the edits no longer give the prepared result"
            raise EditError(msg)
    return write_planned(planned)


def _lost(spec: CommandSpec, why: str) -> CommandStatus:
    status = read_status(spec.status_path)
    base = status.model_dump() if status is not None else {}
    base.update(
        command_id=spec.command_id,
        command=base.get("command", spec.command_id),
        state=RunState.RUNNER_LOST,
        runner_pid=base.get("runner_pid", 0),
        started_at=base.get("started_at", 0.0),
        error=why,
    )
    return CommandStatus.model_validate(base)


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # a runner that died at once: its status says
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()


def _runner_of(status_path: pathlib.Path) -> int | None:
    """The pid of a runner process already working on the command of ``status_path``."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if "politerm.bridge.runner" in cmd and str(status_path) in cmd:
            return int(proc.pid)
    return None


def _private_open(path: pathlib.Path) -> t.BinaryIO:
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
