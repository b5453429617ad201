"""One postman per session: an exclusive ``flock``, and starting one in the background.

``poli send`` only writes; delivering is the postman's job. When no postman holds the lock,
``poli send`` starts ``poli msg route`` detached (its output goes to a 0600 log file in the
message directory), so a message waiting for a busy receiver is delivered after the sender's
command has returned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing as t

from politerm._internal.pidlock import PidLock

if t.TYPE_CHECKING:
    import pathlib

ENV_POSTMAN: t.Final = "POLI_POSTMAN"
"""``off`` stops ``poli send``/``reply`` and MCP tools from starting a background postman."""


class PostmanLock(PidLock):
    """An exclusive lock file in the message directory; held while a postman runs."""

    def __init__(self, directory: pathlib.Path) -> None:
        super().__init__(directory / "postman.lock")


def start_postman(
    directory: pathlib.Path, config_path: pathlib.Path | None, *, idle_exit: float = 300.0
) -> int | None:
    """Start ``poli msg route`` in the background unless a postman runs; return its PID.

    The child gets its own session (a closing terminal does not stop it) and exits after
    ``idle_exit`` seconds with nothing left to deliver or watch. ``POLI_POSTMAN=off`` in the
    environment turns this off (a postman is run by hand or by a test).
    """
    if os.environ.get(ENV_POSTMAN) == "off":
        return None
    lock = PostmanLock(directory)
    if lock.held_elsewhere():
        return None
    argv = [sys.executable, "-m", "politerm", "msg", "route", "--idle-exit", str(idle_exit)]
    if config_path is not None:
        argv += ["--config", str(config_path)]
    log = directory / "postman.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)
    return proc.pid
