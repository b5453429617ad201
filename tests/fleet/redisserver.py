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
import ssl
import subprocess
import typing as t

import pytest

from politerm.testing.retry import WaitTimeout, retry_until

USER = "poli"
"""The ACL user the fleet connects as (the default user is locked by an unknown password)."""


class TlsFiles(t.NamedTuple):
    """A server certificate (for ``localhost`` only), its key, and the CA that signed it."""

    cert: pathlib.Path
    key: pathlib.Path
    ca: pathlib.Path


def make_tls_files(directory: pathlib.Path) -> TlsFiles:
    """A throwaway CA and a server certificate it signed for ``localhost`` (openssl)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=DNS:localhost\n", encoding="utf-8")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    sign = ["-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-extfile", ext]
    for argv in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=poli CA"],
        ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", csr, *sign, "-out", cert],
    ):
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=30)
    return TlsFiles(cert, key, ca)


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
    tls
        Speak TLS only, with these files (:func:`make_tls_files`).
    acl
        The rules of the fleet's user (keys, channels, commands).
    binds
        The addresses it listens on (loopback, and the host ends of the test machines'
        links: tests/fleet/netns.py).
    """

    def __init__(
        self,
        directory: pathlib.Path,
        tls: TlsFiles | None = None,
        acl: str = "~* &* +@all",
        binds: t.Sequence[str] = ("127.0.0.1",),
    ) -> None:
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
        self.tls = tls
        self.acl = acl
        self.binds = list(binds)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://USER:PASSWORD@127.0.0.1:PORT/0``."""
        return self.url_at("127.0.0.1")

    def url_at(self, host: str) -> str:
        """``redis://USER:PASSWORD@HOST:PORT/0``: one of its :attr:`binds`."""
        return f"redis://{USER}:{self.password}@{host}:{self.port}/0"

    def tls_url(self, host: str = "localhost") -> str:
        """``rediss://USER:PASSWORD@HOST:PORT/0`` (the certificate names ``localhost``)."""
        return f"rediss://{USER}:{self.password}@{host}:{self.port}/0"

    @property
    def anonymous_url(self) -> str:
        """The same server without credentials (refused by the server's ACL)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _listen(self) -> list[str]:
        if self.tls is None:
            return [f"port {self.port}"]
        # TLS only: the plain port is closed, clients are not asked for certificates.
        return [
            "port 0",
            f"tls-port {self.port}",
            f"tls-cert-file {self.tls.cert}",
            f"tls-key-file {self.tls.key}",
            f"tls-ca-cert-file {self.tls.ca}",
            "tls-auth-clients no",
        ]

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=0.2)
        if self.tls is None:
            return sock
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.check_hostname = False
        return context.wrap_socket(sock)

    def _write_config(self) -> pathlib.Path:
        conf = self.directory / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "bind " + " ".join(self.binds),
                    *self._listen(),
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
                    f"user {USER} on >{self.password} {self.acl}",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        conf.chmod(0o600)
        return conf

    def start(self, timeout: float = 10.0) -> None:
        """Start it (again, on the same directory and port) and wait until it answers."""
        self.kill()  # never two servers of one test (the older would outlive the test)
        conf = self._write_config()
        self.proc = subprocess.Popen(
            ["redis-server", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                log = self.directory / "redis.log"
                tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
                pytest.fail(f"redis-server exited with {proc.returncode}: {tail}")
            with contextlib.suppress(OSError), self._connect() as sock:
                sock.sendall(f"AUTH {USER} {self.password}\r\nPING\r\n".encode())
                return b"+PONG" in sock.recv(64) or b"+PONG" in sock.recv(64)
            return False

        try:
            retry_until(answers, timeout, interval=0.02, what=f"redis-server on {self.port}")
        except WaitTimeout:
            self.stop()
            raise

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
