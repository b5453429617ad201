"""The project's router as a supervised background service.

``poli up`` (and every command that starts the loop's agents) starts it; ``poli down``
stops it. A small supervisor process (``python -m politerm.engine.service``) holds an
exclusive ``flock`` on the service file beside the router lock, so one project has at
most one service, and a file whose holder died (``kill -9``) is taken over. The
supervisor runs ``poli route`` as its child and starts it again, with backoff, whenever it
dies while the project's tmux session is up; the child dies with its supervisor (a
parent-death signal), so a killed supervisor leaves no router behind. The router settles
whatever a killed one left mid-delivery, so a restart loses and repeats nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import typing as t

from politerm._internal.pidlock import try_flock
from politerm._internal.private import private_dir

if t.TYPE_CHECKING:
    from politerm.config import Config

START_WAIT = 15.0
"""Longest ``start`` waits for a new supervisor to hold its lock."""
STOP_WAIT = 75.0
"""Longest ``stop`` waits for the router to finish its steps under way (STOP_GRACE + margin)."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
SESSION_LOOK = 10.0
"""How often the supervisor looks whether its tmux session still exists."""
SESSION_RECHECK = 1.0
"""A session seen gone is looked at again this much later before the router is stopped."""
STABLE_AFTER = 30.0
"""A router that lived this long starts the backoff over when it dies."""


@dataclasses.dataclass(frozen=True)
class ServiceInfo:
    """A running service: its supervisor, its current router and how often it restarted."""

    pid: int
    started: float
    router: int | None
    restarts: int

    @property
    def uptime(self) -> float:
        """Seconds since the supervisor started."""
        return max(0.0, time.time() - self.started)


def uptime_text(seconds: float) -> str:
    """A short duration.

    Examples
    --------
    >>> uptime_text(42.4)
    '42s'
    >>> uptime_text(3725)
    '1h02m'
    >>> uptime_text(130)
    '2m10s'
    """
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


ROUTER: t.Final = "service"
"""The kind of the router's service (its file: ``service-<socket>-<session>.pid``)."""
NODE: t.Final = "node"
"""The kind of a fleet node's service (``poli node``: ``node-<socket>-<session>.pid``)."""


class ServiceLock:
    """The service file of one tmux session: held (``flock``) by its supervisor.

    ``kind``: :data:`ROUTER` (the project's router) or :data:`NODE` (its fleet node).
    """

    def __init__(
        self,
        socket: str,
        session: str,
        directory: pathlib.Path | None = None,
        *,
        kind: str = ROUTER,
    ) -> None:
        # Imported here: ``driver.host`` brings the whole turn machinery, and ``poli status``
        # reads a lock without driving anything.
        from politerm.driver import state_dir

        base = directory if directory is not None else state_dir()
        self.path = base / f"{kind}-{socket}-{session}.pid"
        self._fd: int | None = None
        self._info: ServiceInfo | None = None

    @classmethod
    def of(cls, config: Config, kind: str = ROUTER) -> ServiceLock:
        """The service lock of a configuration's session."""
        return cls(config.tmux.socket, config.tmux.session, kind=kind)

    def acquire(self) -> bool:
        """Take the lock without waiting (a dead holder's lock is free); False if held."""
        self._fd = try_flock(self.path)
        if self._fd is None:
            return False
        self.update(router=None, restarts=0)
        return True

    def update(self, *, router: int | None, restarts: int) -> None:
        """Record the current router child (the holder only)."""
        assert self._fd is not None
        started = self._info.started if self._info else time.time()
        self._info = ServiceInfo(os.getpid(), started, router, restarts)
        data = json.dumps(dataclasses.asdict(self._info)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Give the lock up and remove the file."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def read(self) -> ServiceInfo | None:
        """The running service, or None (no file, or a file no live supervisor holds)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                pass  # held: a supervisor runs
            else:
                return None  # a file left by a dead supervisor
            raw = os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        try:
            data = json.loads(raw)
            return ServiceInfo(
                int(data["pid"]), float(data["started"]), data["router"], int(data["restarts"])
            )
        except (ValueError, KeyError, TypeError):
            return None  # being written this instant


def child_argv(kind: str, config_path: pathlib.Path | None) -> list[str]:
    """What a service supervises: ``poli route`` (``poli node`` for a node) on this interpreter."""
    extra = ["--config", str(config_path.resolve())] if config_path is not None else []
    command = "route" if kind == ROUTER else "node"
    return [sys.executable, "-m", "politerm", command, "--as-service", *extra]


def log_path(config: Config, kind: str = ROUTER) -> pathlib.Path:
    """Where the service and its child write their output (beside the store)."""
    return config.store.resolved_path().parent / f"{kind}-{config.tmux.session}.log"


def ensure(config: Config, config_path: pathlib.Path | None = None) -> None:
    """Start the project's service again if it died (``kill -9``), without waiting.

    For what must take effect at once (an answer, an approval). A service that stopped
    cleanly (``poli down``, its session gone) removed its file and is not started; nor is
    one for a project that never had one (a program routing with the library itself).
    """
    lock = ServiceLock.of(config)
    if lock.path.exists() and lock.read() is None:
        _spawn(config, config_path, ROUTER)


def start(
    config: Config, config_path: pathlib.Path | None = None, kind: str = ROUTER
) -> ServiceInfo:
    """Start the project's router service (or node: ``kind``) unless one runs; return it.

    Raises
    ------
    RoutingError
        The supervisor did not come up within ``START_WAIT`` (its log is named).
    """
    from politerm.errors import RoutingError

    lock = ServiceLock.of(config, kind)
    info = lock.read()
    if info is not None:
        return info
    proc = _spawn(config, config_path, kind)
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        info = lock.read()
        # Up once it started its child: the supervisor takes the lock before it looks at the
        # session, and a caller (``poli up``, ``poli status``) is told which router runs.
        if info is not None and info.router is not None:
            return info
        if proc.poll() is not None:
            info = lock.read()  # another one won the race
            if info is not None:
                return info
            break
        time.sleep(0.05)
    what = "router" if kind == ROUTER else kind
    msg = f"the {what} service did not start (see {log_path(config, kind)})"
    raise RoutingError(msg)


def _spawn(config: Config, config_path: pathlib.Path | None, kind: str) -> subprocess.Popen[bytes]:
    log = log_path(config, kind)
    private_dir(log.parent)
    session = [config.tmux.socket, config.tmux.session]
    argv = [sys.executable, "-m", "politerm.engine.service", "--kind", kind, *session, "--"]
    argv += child_argv(kind, config_path)
    env = {**os.environ, "POLI_PROJECT": str(config.project.root), "PYTHONUNBUFFERED": "1"}
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            argv,
            cwd=config.project.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # not in the terminal's process group: Ctrl-C spares it
        )
    finally:
        os.close(fd)


def stop(config: Config, kind: str = ROUTER) -> ServiceInfo | None:
    """Stop the project's router service, or node (its child finishes the step under way).

    Returns the service that was stopped, or None when none ran.
    """
    lock = ServiceLock.of(config, kind)
    info = lock.read()
    if info is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline and lock.read() is not None:
        time.sleep(0.05)
    if lock.read() is not None:  # stuck: no router may outlive `poli down`
        for pid in (info.router, info.pid):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    return info


def _die_with_parent() -> None:
    """In the router child: SIGTERM when the supervisor dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _session_up(socket: str, session: str) -> bool:
    import asyncio

    from politerm.driver import Host
    from politerm.errors import PolitermError

    async def look() -> bool:
        host = Host.at(socket, session)
        try:
            # On any of its servers: the first one's death is only its own agents' death.
            return await host.up_anywhere()
        finally:
            await host.close()

    try:
        return asyncio.run(look())
    except (PolitermError, OSError):  # could not look: keep routing rather than stop
        return True


def _session_gone(socket: str, session: str, stopping: threading.Event) -> bool:
    """Whether the session is gone, seen so on two looks SESSION_RECHECK apart.

    One failed ``has-session`` (a busy machine, a server between two commands) must not
    stop the project's router: only a second look that agrees does.
    """
    if _session_up(socket, session):
        return False
    stopping.wait(SESSION_RECHECK)
    if _session_up(socket, session):
        return False
    print(f"tmux session {session!r} is gone: stopping", flush=True)
    return True


def _wait_while_up(
    child: subprocess.Popen[bytes],
    socket: str,
    session: str,
    stopping: threading.Event,
    follow: bool,
) -> int:
    """Wait for the router to exit; stop it when the session is gone (if ``follow``).

    An idle router learns of its tmux server's end only at its next command, which may be
    minutes away; the session's end is the service's end. A node outlives its sessions: it
    starts its agents when work for them comes, and ``poli down`` stops it; so does a
    service started with no session up (it delivers messages only).
    """
    while True:
        try:
            return child.wait(SESSION_LOOK)
        except subprocess.TimeoutExpired:
            if not follow:
                continue
            if not stopping.is_set() and _session_gone(socket, session, stopping):
                stopping.set()
                child.send_signal(signal.SIGTERM)


def supervise(socket: str, session: str, argv: list[str], kind: str = ROUTER) -> int:
    """Run ``argv`` (the router, or node) and restart it while the session is up; until SIGTERM.

    A node (``kind`` :data:`NODE`), and a router service started while its session was not
    up (its child delivers the messages: ``poli send`` to agents elsewhere), are restarted
    whether the session is up or not, until ``poli down``.
    """
    lock = ServiceLock(socket, session, kind=kind)
    if not lock.acquire():
        return 0  # one runs already
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def on_term(_sig: int, _frame: object) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    restarts, backoff = 0, BACKOFF_FIRST
    follow = kind == ROUTER and _session_up(socket, session)
    try:
        while not stopping.is_set() and not (follow and _session_gone(socket, session, stopping)):
            began = time.monotonic()
            # The supervisor runs no threads, so preexec_fn is safe here.
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
            lock.update(router=child.pid, restarts=restarts)
            code = _wait_while_up(child, socket, session, stopping, follow)
            if stopping.is_set():
                break
            if time.monotonic() - began > STABLE_AFTER:
                backoff = BACKOFF_FIRST
            what = "router" if kind == ROUTER else kind
            print(f"{what} exited ({code}); restarting in {backoff:g}s", flush=True)
            stopping.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            restarts += 1
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                child.kill()
        lock.release()
    return 0


def main(args: list[str]) -> int:
    """``python -m politerm.engine.service [--kind KIND] SOCKET SESSION -- ARGV...``."""
    kind = ROUTER
    if args[:1] == ["--kind"] and len(args) > 1 and args[1] in (ROUTER, NODE):
        kind, args = args[1], args[2:]
    if len(args) < 4 or args[2] != "--":
        usage = "usage: python -m politerm.engine.service [--kind KIND] SOCKET SESSION -- ARGV..."
        print(usage, file=sys.stderr)
        return 2
    return supervise(args[0], args[1], args[3:], kind)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
