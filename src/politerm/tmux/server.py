"""The private tmux server politerm runs its agents on.

Never the user's default server, never their ``~/.tmux.conf``: the server is started on its
own socket name with our own minimal config file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import time
import typing as t

import platformdirs

from politerm._internal import vault
from politerm._internal.private import private_dir
from politerm.errors import SessionNotFound, TmuxCommandError, TmuxLookupError
from politerm.tmux.control import ControlClient
from politerm.tmux.shards import socket_dir

if t.TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from politerm.tmux.pane import Pane

log = logging.getLogger(__name__)

CONFIG_VERSION = "2"

_TMUX_CONF = """\
# politerm's private tmux server. Generated; edits are overwritten.
set -g history-limit {history_limit}
set -g default-size {width}x{height}
set -g window-size latest
# Keep a dead agent's pane so its exit status and last screen can be read.
set -g remain-on-exit on
# An empty server exits; politerm then removes its socket file and this config.
set -s exit-empty on
set -g exit-unattached off
set -g destroy-unattached off
set -g automatic-rename off
set -g allow-rename off
set -g set-clipboard off
set -s escape-time 10
set -s focus-events off
set -g status-left "[poli #S] "
set -g status-left-length 40
set -g @poli_conf {version}
"""


_EXITING_WAIT = 5.0
"""How long a command that may start the server waits out a server still exiting."""


def _server_was_exiting(err: str) -> bool:
    """Whether tmux's error says the server it reached went away under the command.

    >>> _server_was_exiting("server exited unexpectedly")
    True
    >>> _server_was_exiting("duplicate session: t")
    False
    """
    return "server exited unexpectedly" in err or "lost server" in err


def default_config_dir() -> pathlib.Path:
    """Where the generated tmux config lives (user state dir)."""
    return platformdirs.user_state_path("politerm") / "tmux"


NOT_INHERITED: t.Final = ("TMUX", "TMUX_PANE", "COLUMNS", "LINES")
"""What the private server does not take from the environment of the command that starts
it, so no pane inherits it: another tmux's handle, and a terminal size that is not the
pane's (a program that reads ``COLUMNS`` would draw for the wrong width)."""


class TmuxServer:
    """A private tmux server addressed by socket name.

    Parameters
    ----------
    socket_name
        ``tmux -L`` name; defaults to ``poli``.
    tmux
        The tmux binary.
    config_dir
        Where our generated tmux config is written.
    width, height
        Default window size for new sessions.
    history_limit
        Scrollback lines kept per pane (agent transcripts are long).
    """

    def __init__(
        self,
        socket_name: str = "poli",
        *,
        tmux: str = "tmux",
        config_dir: pathlib.Path | None = None,
        width: int = 200,
        height: int = 50,
        history_limit: int = 200_000,
    ) -> None:
        self.socket_name = socket_name
        self.tmux = tmux
        self.config_dir = config_dir or default_config_dir()
        self.width = width
        self.height = height
        self.history_limit = history_limit
        self._clients: dict[str, ControlClient] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    def sibling(self, socket_name: str) -> TmuxServer:
        """Another server with this one's settings (binary, config directory, sizes)."""
        return TmuxServer(
            socket_name,
            tmux=self.tmux,
            config_dir=self.config_dir,
            width=self.width,
            height=self.height,
            history_limit=self.history_limit,
        )

    # --- one-shot tmux processes (bootstrap and buffers only) ---------------------------

    async def run(
        self, *args: str, input: bytes | None = None, timeout: float = 10.0, start: bool = False
    ) -> tuple[int, str, str]:
        """Run one tmux command as its own process on our socket.

        Used only where control mode cannot serve: starting the server and looking at it
        before a session exists. ``start`` marks a command that may start the server: only
        then is our generated config written and named (``-f``).
        """
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        # -f /dev/null otherwise: a command that does not start a server reads no config,
        # and naming ours would recreate it after close_if_empty() removed it.
        conf = str(self.config_file()) if start else os.devnull
        proc = await asyncio.create_subprocess_exec(
            self.tmux,
            "-L",
            self.socket_name,
            "-f",
            conf,
            *args,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            # Not wait_for: on Python 3.11 it drops a cancel that comes with its result.
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            msg = f"tmux {args[0] if args else ''} did not finish within {timeout:g}s"
            raise TmuxLookupError(msg) from None
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    def config_file(self) -> pathlib.Path:
        """Write (if needed) and return our tmux config file (mode 0600)."""
        path = self.config_dir / f"tmux-{self.socket_name}.conf"
        text = _TMUX_CONF.format(
            history_limit=self.history_limit,
            width=self.width,
            height=self.height,
            version=CONFIG_VERSION,
        )
        if not path.exists() or path.read_text() != text:
            private_dir(self.config_dir)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            tmp.replace(path)
        return path

    async def is_running(self) -> bool:
        """Whether the server answers on its socket."""
        rc, _, _ = await self.run("list-sessions", "-F", "#{session_name}")
        return rc == 0

    async def list_sessions(self) -> list[str]:
        """Names of the server's sessions; empty when the server is not running."""
        rc, out, _ = await self.run("list-sessions", "-F", "#{session_name}")
        return out.split() if rc == 0 else []

    async def has_session(self, name: str) -> bool:
        """Whether session ``name`` exists (exact match)."""
        rc, _, _ = await self.run("has-session", "-t", f"={name}")
        return rc == 0

    async def ensure_session(
        self,
        name: str,
        *,
        window_name: str = "control",
        argv: Sequence[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> bool:
        """Create session ``name`` unless it exists; return True if it was created.

        The server is started with our config if it was not running. ``options`` are session
        user options (``@name``: value) set on the new session, e.g. its project directory.
        """
        args = [
            "new-session",
            "-d",
            "-s",
            name,
            "-n",
            window_name,
            "-x",
            str(self.width),
            "-y",
            str(self.height),
        ]
        if cwd is not None:
            args += ["-c", str(cwd)]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        args += list(argv or ["sh"])
        deadline = time.monotonic() + _EXITING_WAIT
        while True:
            if await self.has_session(name):
                return False
            rc, _, err = await self.run(*args, start=True)
            if rc == 0:
                break
            # A server that was just killed may still hold its socket while it exits: our
            # command reached it and died with it. Once it is gone, a new one starts.
            if not _server_was_exiting(err) or time.monotonic() > deadline:
                msg = "new-session"
                raise TmuxCommandError(msg, [err.strip()])
            await asyncio.sleep(0.05)
        # A server someone else started (e.g. a test fixture) lacks our options.
        rc, out, _ = await self.run("show-options", "-gqv", "@poli_conf")
        if out.strip() != CONFIG_VERSION:
            await self.run("source-file", str(self.config_file()))
        for option, value in (options or {}).items():
            # "=name:" is exact (set-option reads a plain "=name" as a pane target).
            await self.run("set-option", "-t", f"={name}:", option, value)
        return True

    async def connect(self, session: str) -> ControlClient:
        """Return the (shared) control-mode connection to ``session``, starting it if needed."""
        # One start at a time per session: two tasks connecting at once (a postman's lanes)
        # would otherwise each start a client, and the one overwritten would never be closed.
        lock = self._connecting.setdefault(session, asyncio.Lock())
        async with lock:
            client = self._clients.get(session)
            if client is not None and (client.connected or client.dead_reason is None):
                return client
            client = ControlClient(self.socket_name, session, tmux=self.tmux)
            await client.start()
            self._clients[session] = client
        # Secrets this process redacts from the store are kept in this server's memory,
        # for the process that delivers them (see politerm._internal.vault).
        vault.use_tmux(self.socket_name, self.tmux)
        return client

    async def pane(self, session: str, pane_id: str) -> Pane:
        """A :class:`Pane` handle on ``pane_id`` over the session's control connection."""
        from politerm.tmux.pane import Pane

        return Pane(await self.connect(session), pane_id, self)

    async def kill_session(self, name: str) -> None:
        """Kill session ``name`` (its panes get SIGHUP; see :meth:`Pane.kill` for trees).

        When it was the server's last session, the server exits and its socket file and
        generated config are removed (:meth:`close_if_empty`).
        """
        client = self._clients.pop(name, None)
        if client is not None:
            await client.close()
        rc, _, err = await self.run("kill-session", "-t", f"={name}")
        if rc != 0 and "can't find session" in err:
            msg = f"no tmux session {name!r} on socket {self.socket_name!r}"
            raise SessionNotFound(msg)
        await self.close_if_empty()

    async def kill_server(self) -> None:
        """Stop the whole private server and remove its socket file and generated config."""
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
        await self.run("kill-server")
        await self.kill_server_files()

    def socket_path(self) -> pathlib.Path:
        """The server's socket file (``$TMUX_TMPDIR`` or /tmp, ``tmux-<uid>/<name>``)."""
        return socket_dir() / self.socket_name

    async def close_if_empty(self, *, wait: float = 3.0) -> bool:
        """Stop the server if it has no session left; remove its socket file and config.

        Returns True when the server is gone. An empty server exits by itself
        (``exit-empty on``) but tmux leaves its socket file behind; politerm does not. A
        server still shutting down is given up to ``wait`` seconds to stop listening; the
        socket of a server that keeps listening is never removed.
        """
        rc, out, _ = await self.run("list-sessions", "-F", "#{session_name}")
        if rc == 0 and out.split():
            return False
        if rc == 0:
            await self.run("kill-server")
        await self.kill_server_files(wait=wait)
        return not _listening(self.socket_path())

    async def kill_server_files(self, *, wait: float = 3.0) -> None:
        """Remove the socket file (once nothing listens on it) and the generated config."""
        path = self.socket_path()
        deadline = asyncio.get_running_loop().time() + wait
        # No notification says a socket stopped listening: look every 20 ms, bounded.
        while path.exists() and _listening(path):
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("tmux server on %s still listens after %.1fs; socket kept", path, wait)
                break
            await asyncio.sleep(0.02)
        self._remove_files()

    def _remove_files(self) -> None:
        path = self.socket_path()
        if path.exists() and not _listening(path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.config_dir / f"tmux-{self.socket_name}.conf").unlink()

    async def close(self) -> None:
        """Close every control connection this object opened (the server keeps running)."""
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()


def _listening(path: pathlib.Path) -> bool:
    """Whether a server accepts connections on the socket file ``path`` (a live server)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True
