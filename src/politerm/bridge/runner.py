"""Run one command with three timeouts and a status file; never hang.

The original bridge kept hanging on its commands. Every wait here is bounded:

- **launch**: a command still silent after ``launch_timeout`` is marked
  ``past_launch_timeout`` in its status file and goes on, as in the original's runner: a
  quiet start is not a hang (a command that cannot start at all is ``launch_failed`` at once;
  one whose program is not found ends ``launch_failed`` with ``not found``);
- **activity**: silence longer than ``activity_timeout`` (since its last output, or since
  its start if it never printed) kills it;
- **total**: it may not run longer than ``total_timeout``.

Whichever of the two killing deadlines comes first fires; the status file says which.

The command runs in its own session (``setsid``), so on a timeout the whole tree — children
that forked, backgrounded or double-forked inside the session — is killed and verified gone.
Output is read in chunks as it arrives (never ``communicate()``), redacted line by line into
per-command files; after the process ends, the pipes are drained for at most
:data:`DRAIN_SECONDS` (a grandchild that escaped with its own ``setsid`` may hold them open
for ever). The status JSON (state, pids, exit code, timestamps, last output, which timeout
fired) is rewritten atomically at every change of state and at most once a second while
output flows, so another process can follow it with a file watcher.

``python -m politerm.bridge.runner -`` runs a spec (read from stdin) detached from the
bridge: a bridge killed with ``kill -9`` finds the command's outcome in the status file when
it restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import typing as t

import psutil
from pydantic import BaseModel, ConfigDict, Field

from politerm._internal.aio import wait_event
from politerm._internal.private import RedactedFile, write_private
from politerm._internal.proctree import kill_processes, process_tree
from politerm.errors import AgentError, RunnerError
from politerm.redact import Redactor
from politerm.store.db import ensure_private_dir

if t.TYPE_CHECKING:
    from politerm.bridge.models import CommandExecutionInstruction

DRAIN_SECONDS: t.Final = 2.0
"""How long the pipes are read after the process ended (or was killed)."""

KILL_GRACE: t.Final = 2.0
"""Seconds between SIGTERM and SIGKILL for a timed-out tree."""

LAST_OUTPUT_CHARS: t.Final = 2000
STATUS_INTERVAL: t.Final = 1.0


class RunState(str, enum.Enum):
    """Where a command stands in its status file."""

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    TIMED_OUT = "timed_out"
    LAUNCH_FAILED = "launch_failed"
    RUNNER_LOST = "runner_lost"

    @property
    def is_final(self) -> bool:
        """The command is over (the status file will not change again).

        Examples
        --------
        >>> RunState.RUNNING.is_final, RunState.TIMED_OUT.is_final
        (False, True)
        """
        return self not in (RunState.STARTING, RunState.RUNNING)


class TimeoutKind(str, enum.Enum):
    """Which timeout fired (``launch`` only marks a command, it never ends one)."""

    LAUNCH = "launch"
    ACTIVITY = "activity"
    TOTAL = "total"


class CommandSpec(BaseModel):
    """Everything the runner needs; written as JSON for a detached runner."""

    model_config = ConfigDict(extra="forbid")

    # Names the command's files: no separators, so it cannot point outside out_dir.
    command_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: str
    working_directory: str
    env: dict[str, str] = Field(default_factory=dict)
    launch_timeout: float = 30.0
    activity_timeout: float = 300.0
    total_timeout: float = 3600.0
    capture_stdout: bool = True
    capture_stderr: bool = True
    out_dir: str
    redact_patterns: list[str] = Field(default_factory=list)

    @classmethod
    def from_instruction(
        cls,
        instr: CommandExecutionInstruction,
        *,
        base_dir: pathlib.Path,
        out_dir: pathlib.Path,
        redact_patterns: t.Sequence[str] = (),
    ) -> CommandSpec:
        """The spec for one of a task's commands."""
        cwd = pathlib.Path(instr.working_directory or ".").expanduser()
        captured = {c.value for c in instr.outputs_to_capture}
        return cls(
            command_id=instr.command_id,
            command=instr.command_string,
            working_directory=str(cwd if cwd.is_absolute() else base_dir / cwd),
            env=dict(instr.env),
            launch_timeout=instr.launch_timeout,
            activity_timeout=instr.activity_timeout,
            total_timeout=instr.total_timeout,
            capture_stdout="stdout" in captured,
            capture_stderr="stderr" in captured,
            out_dir=str(out_dir),
            redact_patterns=list(redact_patterns),
        )

    @property
    def status_path(self) -> pathlib.Path:
        """``<out_dir>/<command_id>.status.json``."""
        return pathlib.Path(self.out_dir) / f"{self.command_id}.status.json"

    def stream_path(self, name: str) -> pathlib.Path:
        """``<out_dir>/<command_id>.<stdout|stderr>.log``."""
        return pathlib.Path(self.out_dir) / f"{self.command_id}.{name}.log"


class CommandStatus(BaseModel):
    """The status file's content."""

    command_id: str
    command: str
    state: RunState
    runner_pid: int
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timeout_fired: TimeoutKind | None = None
    started_at: float
    first_output_at: float | None = None
    last_output_at: float | None = None
    finished_at: float | None = None
    last_output: str = ""
    past_launch_timeout: bool = False
    stdout_path: str | None = None
    stderr_path: str | None = None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        """Exited on its own with status 0."""
        return self.state is RunState.EXITED and self.exit_code == 0

    def describe(self) -> str:
        """One line: how it ended.

        Examples
        --------
        >>> CommandStatus(command_id="c", command="x", state="timed_out", runner_pid=1,
        ...               started_at=0, timeout_fired="activity").describe()
        'c: timed_out (activity timeout)'
        """
        if self.timeout_fired is not None:
            return f"{self.command_id}: {self.state.value} ({self.timeout_fired.value} timeout)"
        if self.state is RunState.EXITED:
            how = f"signal {self.signal}" if self.signal else f"exit {self.exit_code}"
            return f"{self.command_id}: exited ({how})"
        return f"{self.command_id}: {self.state.value}" + (f": {self.error}" if self.error else "")


def read_status(path: pathlib.Path) -> CommandStatus | None:
    """The status file at ``path``, or None if it is absent or not (yet) readable."""
    try:
        return CommandStatus.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


class _Run:
    def __init__(self, spec: CommandSpec, redactor: Redactor) -> None:
        self.spec = spec
        self.redactor = redactor
        self.output = asyncio.Event()
        self.tail = ""
        self.last_write = 0.0
        self.last_output_mono: float | None = None
        self.status = CommandStatus(
            command_id=spec.command_id,
            command=redactor.redact(spec.command),
            state=RunState.STARTING,
            runner_pid=os.getpid(),
            started_at=time.time(),
            stdout_path=str(spec.stream_path("stdout")) if spec.capture_stdout else None,
            stderr_path=str(spec.stream_path("stderr")) if spec.capture_stderr else None,
        )

    def save(self) -> None:
        self.status.last_output = self.redactor.redact(self.tail[-LAST_OUTPUT_CHARS:])
        write_private(self.spec.status_path, self.status.model_dump_json(indent=2), sync=True)
        self.last_write = time.monotonic()

    def got(self, chunk: bytes) -> None:
        now = time.time()
        if self.status.first_output_at is None:
            self.status.first_output_at = now
        self.status.last_output_at = now
        self.last_output_mono = time.monotonic()
        self.tail = (self.tail + chunk.decode("utf-8", errors="replace"))[-4 * LAST_OUTPUT_CHARS :]
        self.output.set()
        if time.monotonic() - self.last_write >= STATUS_INTERVAL:
            self.save()


class _Pipe:
    """Reads one pipe from the event loop as data arrives; ``closed`` is set at its end.

    Non-blocking: no read ever waits, so a pipe held open by a stray process cannot hang us.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, stream: RedactedFile | None, run: _Run
    ):
        self.loop = loop
        self.fd = fd
        self.stream = stream
        self.run = run
        self.closed = asyncio.Event()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.stop()
            return
        if self.stream is not None:
            self.stream.write(chunk.decode("utf-8", errors="replace"))
        self.run.got(chunk)

    def stop(self) -> None:
        if not self.closed.is_set():
            self.loop.remove_reader(self.fd)
            self.closed.set()


def _deadline(run: _Run, started: float) -> tuple[float, TimeoutKind]:
    """The next deadline (monotonic) and the timeout it belongs to."""
    spec = run.spec
    deadlines = [
        (started + spec.total_timeout, TimeoutKind.TOTAL),
        # Silence counts from the start too: a command that never prints is inactive.
        ((run.last_output_mono or started) + spec.activity_timeout, TimeoutKind.ACTIVITY),
    ]
    if run.last_output_mono is None and not run.status.past_launch_timeout:
        deadlines.append((started + spec.launch_timeout, TimeoutKind.LAUNCH))
    return min(deadlines, key=lambda d: d[0])


_NOT_FOUND: t.Final = re.compile(
    r"^(?:/bin/)?sh: (?:(?:line )?\d+: )?(?P<name>.+?): (?:command )?not found\s*$", re.MULTILINE
)


def not_found_name(rc: int | None, output: str) -> str | None:
    r"""The program ``/bin/sh`` could not find, when that is why the command ended.

    ``sh`` exits 127 for a missing program and says so on stderr (dash and bash word it
    differently).

    Examples
    --------
    >>> not_found_name(127, "sh: 1: nosuchprog: not found\n")
    'nosuchprog'
    >>> not_found_name(127, "sh: line 1: nosuchprog: command not found")
    'nosuchprog'
    >>> not_found_name(1, "sh: 1: nosuchprog: not found") is None
    True
    """
    if rc != 127:
        return None
    m = _NOT_FOUND.search(output)
    return m["name"] if m else None


_subreaper = False


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux ``PR_SET_CHILD_SUBREAPER``).

    Only a process that runs nothing but the command may do this: every one of its
    children is then the command's, and is killed with it.
    """
    global _subreaper
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


_PR_SET_CHILD_SUBREAPER: t.Final = 36


def _tree_and_session(pid: int) -> list[psutil.Process]:
    """``pid``'s tree and every process still in the session it leads.

    The command ran under ``setsid``, so its session id is its pid, even after the shell
    itself is gone.
    """
    procs = {p.pid: p for p in process_tree(pid)}
    if _subreaper:
        # Orphans (even ones that called setsid) were re-parented to us; we have no other
        # children in a detached runner.
        with contextlib.suppress(psutil.Error):
            procs.update({p.pid: p for p in psutil.Process().children(recursive=True)})
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid not in procs and os.getsid(proc.pid) == pid:
                procs[proc.pid] = proc
    return list(procs.values())


async def _kill_tree(pid: int, exited: asyncio.Event, what: str) -> None:
    """SIGTERM the command and its tree, SIGKILL what is left after the grace period.

    The command's own process is signalled here and waited for through ``exited`` (its
    pidfd), not reaped by psutil, so that ``Popen`` still learns its exit status.
    """
    procs = [p for p in await asyncio.to_thread(_tree_and_session, pid) if p.pid != pid]
    root_alive = not exited.is_set()
    if root_alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(AgentError):  # a survivor shows in the final state instead
        await asyncio.to_thread(kill_processes, procs, grace=KILL_GRACE, what=what)
    if root_alive and not await wait_event(exited, KILL_GRACE):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def run_command_async(spec: CommandSpec) -> CommandStatus:
    """Run ``spec`` to the end (or a timeout) and return its final status.

    Raises
    ------
    RunnerError
        The output folder cannot be created or written.
    """
    try:
        ensure_private_dir(pathlib.Path(spec.out_dir))
    except OSError as e:
        msg = f"command {spec.command_id}: cannot create {spec.out_dir}: {e.strerror or e}"
        raise RunnerError(msg) from e
    run = _Run(spec, Redactor(spec.redact_patterns))
    run.save()
    started = time.monotonic()
    try:
        # Popen, not asyncio's subprocess: its wait() also waits for the pipes to close,
        # which a grandchild holding them would delay for ever.
        proc = subprocess.Popen(  # noqa: ASYNC220  # fork+exec only; it never waits
            ["/bin/sh", "-c", spec.command],
            cwd=spec.working_directory,
            env={**os.environ, **spec.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        where = f" (working directory {spec.working_directory})" if e.filename else ""
        run.status.state = RunState.LAUNCH_FAILED
        run.status.error = f"{e.strerror or e}{where}"
        run.status.finished_at = time.time()
        run.save()
        return run.status
    assert proc.stdout is not None
    assert proc.stderr is not None
    loop = asyncio.get_running_loop()
    run.status.pid = proc.pid
    run.status.state = RunState.RUNNING
    run.save()
    streams = [
        RedactedFile(spec.stream_path(name), run.redactor, append=False) if wanted else None
        for name, wanted in (("stdout", spec.capture_stdout), ("stderr", spec.capture_stderr))
    ]
    pipes = [
        _Pipe(loop, proc.stdout.fileno(), streams[0], run),
        _Pipe(loop, proc.stderr.fileno(), streams[1], run),
    ]
    # A pidfd becomes readable when the process exits: an event, not a poll.
    exited = asyncio.Event()
    pidfd = os.pidfd_open(proc.pid)
    loop.add_reader(pidfd, exited.set)
    fired: TimeoutKind | None = None
    try:
        while not exited.is_set():
            at, kind = _deadline(run, started)
            left = at - time.monotonic()
            if left <= 0:
                if kind is TimeoutKind.LAUNCH:
                    # Marked, not killed: the activity and total timeouts decide.
                    run.status.past_launch_timeout = True
                    run.save()
                    continue
                fired = kind
                break
            run.output.clear()
            waiters = {asyncio.create_task(exited.wait()), asyncio.create_task(run.output.wait())}
            _done, pending = await asyncio.wait(
                waiters, timeout=left, return_when="FIRST_COMPLETED"
            )
            for w in pending:
                w.cancel()
        # On a timeout this kills the command; after a normal exit it kills what the
        # command left running in its session, so nothing outlives the task.
        await _kill_tree(proc.pid, exited, f"command {spec.command_id}")
        await wait_event(exited, KILL_GRACE * 2 + 1)
        await asyncio.gather(*(wait_event(pipe.closed, DRAIN_SECONDS) for pipe in pipes))
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        for pipe in pipes:
            pipe.stop()
        for s in streams:
            if s is not None:
                s.close()
        proc.stdout.close()
        proc.stderr.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    rc = proc.returncode
    run.status.finished_at = time.time()
    run.status.timeout_fired = fired
    run.status.state = RunState.TIMED_OUT if fired else RunState.EXITED
    if rc is not None and rc < 0:
        run.status.signal = -rc
    elif rc is not None and not fired:
        run.status.exit_code = rc
    if rc is None:
        run.status.error = "the process did not exit after SIGKILL"
    missing = None if fired else not_found_name(rc, run.tail)
    if missing is not None:
        run.status.state = RunState.LAUNCH_FAILED
        run.status.error = f"{missing}: not found"
    run.save()
    return run.status


def run_command(spec: CommandSpec) -> CommandStatus:
    """Synchronous :func:`run_command_async` (its own event loop)."""
    return asyncio.run(run_command_async(spec))


def main(argv: t.Sequence[str]) -> int:
    """``python -m politerm.bridge.runner SPEC.json|- [TAG]``: run detached.

    ``-`` reads the spec from stdin (how the bridge passes it: the unredacted command never
    touches the disk); ``TAG`` is ignored and only identifies the process (the bridge passes
    the status file's path, to find a runner it started before a restart).
    """
    if len(argv) not in (1, 2):
        print("usage: python -m politerm.bridge.runner SPEC.json|- [TAG]", file=sys.stderr)
        return 2
    become_subreaper()
    try:
        raw = sys.stdin.buffer.read() if argv[0] == "-" else pathlib.Path(argv[0]).read_bytes()
        spec = CommandSpec.model_validate_json(raw)
        status = run_command(spec)
    except (OSError, ValueError, RunnerError) as e:
        print(f"politerm runner: {e}", file=sys.stderr)
        return 1
    return 0 if status.succeeded else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
