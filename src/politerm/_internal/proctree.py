"""Find and kill a process tree, verified gone.

Some agents ignore the SIGHUP that closing their terminal sends (Gemini CLI re-parents itself
to PID 1 and keeps running), so stopping an agent means recording its whole tree first and
signalling every PID in it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import typing as t

import psutil

from politerm.errors import AgentError

if t.TYPE_CHECKING:
    from collections.abc import Iterable


def process_tree(pid: int) -> list[psutil.Process]:
    """Return ``pid``, its descendants and every process of its session.

    The session members catch children that were re-parented away from the tree (a
    daemonising agent that did not call ``setsid``).
    """
    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    procs[root.pid] = root
    with contextlib.suppress(psutil.Error):
        for child in root.children(recursive=True):
            procs[child.pid] = child
    try:
        sid = os.getsid(pid)
    except OSError:
        sid = -1
    if sid == pid:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.pid not in procs and os.getsid(proc.pid) == sid:
                    procs[proc.pid] = proc
    return list(procs.values())


def kill_processes(
    procs: Iterable[psutil.Process], *, grace: float = 3.0, what: str = "process tree"
) -> None:
    """SIGTERM every process, SIGKILL the ones left after ``grace`` seconds, verify all gone.

    Raises
    ------
    AgentError
        When a process survived SIGKILL (e.g. stuck in uninterruptible sleep).
    """
    alive = [p for p in procs if _running(p)]
    if not alive:
        return
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    alive = _wait_gone(alive, grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    alive = _wait_gone(alive, grace)
    if alive:
        pids = ", ".join(str(p.pid) for p in alive)
        msg = f"{what}: processes {pids} survived SIGKILL"
        raise AgentError(msg)


def _wait_gone(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Wait until every process is gone or a zombie; return the ones still running.

    ``psutil.wait_procs`` would wait out the whole timeout on a zombie whose parent (tmux,
    not us) has not reaped it yet, though a zombie is already dead.
    """
    deadline = time.monotonic() + seconds
    while True:
        psutil.wait_procs(procs, timeout=0)  # reaps the ones that are our own children
        procs = [p for p in procs if _running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.02)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
