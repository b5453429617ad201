"""Running a bridge: in the foreground, as a daemon with a pid file, and stopping it.

One bridge serves a queue at a time: it holds an ``flock`` on ``bridge.lock`` beside the
queue for its whole life, and writes its pid to ``bridge.pid``. ``poli bridge stop`` sends
SIGTERM and waits (bounded) for the process to end; the bridge finishes the step it is in
the middle of only as far as the journal needs — a command's detached runner keeps going
and the next bridge adopts it. While it serves, the run store's ``bridge:<queue>`` key names
its pid (the dashboard and the web monitor list it among the project's sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import typing as t

from politerm._internal.private import write_private
from politerm._internal.waits import pid_alive, wait_until
from politerm.bridge.bridge import Bridge
from politerm.bridge.executor import BuiltinExecutor, Executor
from politerm.bridge.queue import TaskQueue
from politerm.errors import BridgeError, StoreError
from politerm.redact import Redactor
from politerm.store.bridge import BridgeJournal
from politerm.store.db import create_private_file, ensure_private_dir

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from politerm.config import Config
    from politerm.store.runstore import RunStore

QUEUE_ENV: t.Final = "POLI_BRIDGE_QUEUE"
DEFAULT_QUEUE: t.Final = pathlib.Path(".poli") / "bridge" / "task_queue.json"
START_TIMEOUT: t.Final = 20.0
STOP_TIMEOUT: t.Final = 20.0


def queue_path(option: pathlib.Path | None, project_root: pathlib.Path) -> pathlib.Path:
    """``--queue``, else ``$POLI_BRIDGE_QUEUE``, else ``<project>/.poli/bridge/...``."""
    if option is not None:
        return option.absolute()
    env = os.environ.get(QUEUE_ENV)
    return pathlib.Path(env).absolute() if env else project_root / DEFAULT_QUEUE


def pid_path(queue: TaskQueue) -> pathlib.Path:
    """``bridge.pid`` beside the queue."""
    return queue.root / "bridge.pid"


def log_path(queue: TaskQueue) -> pathlib.Path:
    """``bridge.log`` beside the queue (the daemon's output)."""
    return queue.root / "bridge.log"


def running_pid(queue: TaskQueue) -> int | None:
    """The pid of the bridge serving ``queue``, if one is alive."""
    try:
        pid = int(pid_path(queue).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def make_executor(spec: str, config: Config, *, report: str = "block") -> Executor:
    """``builtin`` or ``agent:NAME`` (NAME: an agent of the configuration or a profile).

    ``report`` is how an agent reports (``block`` or ``fenced``; see
    :class:`~politerm.bridge.agent.AgentExecutor`).

    Raises
    ------
    BridgeError
        An unknown executor.
    """
    if spec == "builtin":
        return BuiltinExecutor()
    if spec.startswith("agent:") and spec[6:]:
        from politerm.bridge.agent import AgentExecutor

        return AgentExecutor(spec[6:], config, report=report)
    msg = f"--executor {spec!r}: expected 'builtin' or 'agent:NAME'"
    raise BridgeError(msg)


@contextlib.contextmanager
def _exclusive(queue: TaskQueue) -> Iterator[None]:
    lock = queue.root / "bridge.lock"
    ensure_private_dir(queue.root)
    create_private_file(lock)
    fd = os.open(lock, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = running_pid(queue)
            msg = f"a bridge already serves {queue.path}" + (f" (pid {other})" if other else "")
            raise BridgeError(msg) from None
        write_private(pid_path(queue), f"{os.getpid()}\n")
        try:
            yield
        finally:
            pid_path(queue).unlink(missing_ok=True)
    finally:
        os.close(fd)


def serve(
    queue: TaskQueue,
    executor: Executor,
    store: RunStore,
    *,
    base_dir: pathlib.Path,
    redact_patterns: t.Sequence[str] = (),
    once: bool = False,
    log: Callable[[str], None] | None = None,
) -> list[tuple[str, str]]:
    """Serve ``queue`` until SIGTERM/SIGINT (or, with ``once``, until nothing is left to do).

    Returns
    -------
    list[tuple[str, str]]
        ``(task_id, final status)`` of every task finalized meanwhile.
    """
    redactor = Redactor(redact_patterns)

    def say(line: str) -> None:
        if log is not None:
            log(redactor.redact(line))  # the queue's path may hold a configured secret

    queue.on_repair = lambda repair: say("warning: " + repair.describe())
    journal = BridgeJournal(store, str(queue.path), redactor)
    bridge = Bridge(
        queue,
        executor,
        journal,
        base_dir=base_dir,
        redactor=redactor,
        redact_patterns=redact_patterns,
        log=say,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if not once:
            say(f"bridge {os.getpid()} serving {queue.path} with {executor.name}")
        work = asyncio.create_task(bridge.drain() if once else bridge.run(stop))
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({work, stopper}, return_when="FIRST_COMPLETED")
            if work.done():
                work.result()
            else:
                # Mid-step is fine: the journal says where it was, a command's runner goes
                # on by itself, and the next bridge settles the rest.
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        finally:
            stopper.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await executor.close()

    with _exclusive(queue), _announced(store, queue, executor.name):
        asyncio.run(main())
    say("bridge stopped")
    return [(tid, status.value) for tid, status in bridge.finalized]


@contextlib.contextmanager
def _announced(store: RunStore, queue: TaskQueue, executor: str) -> Iterator[None]:
    """While serving, say so in the store: the dashboard and web monitor list the bridge."""
    key = f"bridge:{queue.path}"
    info = {"pid": os.getpid(), "queue": str(queue.path), "executor": executor}
    store.set_meta(key, json.dumps(info))
    store.add_event("bridge.started", detail=f"bridge {os.getpid()} serving {queue.path}")
    try:
        yield
    finally:
        with contextlib.suppress(StoreError):
            store.set_meta(key, "")
            store.add_event("bridge.stopped", detail=f"bridge {os.getpid()} stopped")


def start_daemon(argv: t.Sequence[str], queue: TaskQueue) -> int:
    """Start ``poli bridge start ARGV`` in the background; return its pid once it serves.

    Raises
    ------
    BridgeError
        A bridge already serves the queue, or the new one did not come up (its log says why).
    """
    other = running_pid(queue)
    if other is not None:
        msg = f"a bridge already serves {queue.path} (pid {other})"
        raise BridgeError(msg)
    ensure_private_dir(queue.root)
    log = log_path(queue)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "politerm", "bridge", "start", *argv],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
        )
    finally:
        os.close(fd)

    def up() -> int | None:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            msg = f"the bridge exited at once ({proc.returncode}): {tail[0]}"
            raise BridgeError(msg)
        return proc.pid if running_pid(queue) == proc.pid else None

    return asyncio.run(
        wait_until(
            up,
            dirs=[queue.root],
            pids=[proc.pid],
            timeout=START_TIMEOUT,
            what=f"the bridge to write {pid_path(queue)}",
            error=BridgeError,
        )
    )


def stop_daemon(queue: TaskQueue, *, timeout: float = STOP_TIMEOUT) -> int | None:
    """SIGTERM the bridge serving ``queue`` and wait until it is gone; its pid, or None.

    Raises
    ------
    BridgeError
        It did not stop within ``timeout`` seconds.
    """
    pid = running_pid(queue)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)

    def gone() -> bool | None:
        return True if not pid_alive(pid) else None

    try:
        asyncio.run(
            wait_until(
                gone,
                dirs=[queue.root],
                pids=[pid],
                timeout=timeout,
                what="the bridge",
                error=BridgeError,
            )
        )
    except BridgeError:
        msg = f"bridge {pid} did not stop within {timeout:g} s after SIGTERM"
        raise BridgeError(msg) from None
    return pid
