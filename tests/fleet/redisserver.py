"""A private redis-server for the fleet tests: its own port, directory, ACL user and AOF.

Every test that needs Redis starts its own server (about 10 ms), so tests never share
streams, and a test can kill it (``kill -9``), restart it on the same directory (the AOF
brings back what was acknowledged) or pause it (a partition seen from every client).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import time

import pytest

USER = "poli"
"""The ACL user the fleet connects as (the default user is locked by an unknown password)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process on loopback, restartable on the same data directory.

    Parameters
    ----------
    directory
        Where its config, AOF and log live (0700).
    """

    def __init__(self, directory: pathlib.Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail(
                "redis-server is not installed: the fleet tests run a real one "
                "(scripts/test installs Debian's redis-server; or apt-get install -y redis-server)"
            )
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.port = _free_port()
        self.password = secrets.token_hex(16)
        self._default_password = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://USER:PASSWORD@127.0.0.1:PORT/0``."""
        return f"redis://{USER}:{self.password}@127.0.0.1:{self.port}/0"

    @property
    def anonymous_url(self) -> str:
        """The same server without credentials (refused by the server's ACL)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _write_config(self) -> pathlib.Path:
        conf = self.directory / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {self.port}",
                    f"dir {self.directory}",
                    "daemonize no",
                    "save ''",
                    "appendonly yes",
                    "appendfsync always",
                    f"logfile {self.directory / 'redis.log'}",
                    # Not `user default off`: Redis replays the AOF as the default user
                    # and re-checks its ACL at each EXEC, so with the default user off it
                    # silently drops every transaction and every Lua script's writes on
                    # restart (redis/redis#14541, Debian's 7.0 has it). Locked by a
                    # password nobody is given, it still refuses unauthenticated clients.
                    f"user default on >{self._default_password} ~* &* +@all",
                    f"user {USER} on >{self.password} ~* &* +@all",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        conf.chmod(0o600)
        return conf

    def start(self, timeout: float = 10.0) -> None:
        """Start it (again, on the same directory and port) and wait until it answers."""
        conf = self._write_config()
        self.proc = subprocess.Popen(
            ["redis-server", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.directory / "redis.log"
                tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
                pytest.fail(f"redis-server exited with {self.proc.returncode}: {tail}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock,
            ):
                sock.sendall(f"AUTH {USER} {self.password}\r\nPING\r\n".encode())
                if b"+PONG" in sock.recv(64) or b"+PONG" in sock.recv(64):
                    return
            time.sleep(0.02)
        pytest.fail(f"redis-server on port {self.port} did not answer within {timeout} s")

    def kill(self) -> None:
        """``kill -9`` the server (what was fsynced to the AOF survives)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Kill it and start it again on the same directory and port."""
        self.kill()
        self.start()

    def pause(self) -> None:
        """Stop the process (SIGSTOP): every client's commands hang, as in a partition."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """End it for good (a paused server is woken first so that it can die)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
            self.kill()
