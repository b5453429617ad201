"""What every demo shares: its scratch project, its private tmux server, its outcome.

A demo is a workflow like any other: it reaches its tmux server through the driver's
:class:`~politerm.driver.Host` only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import tempfile
import typing as t

from politerm._internal.private import write_private
from politerm.driver import Host

Say = t.Callable[[str], None]


@dataclasses.dataclass
class Outcome:
    """How a demo ended: whether it worked, what happened, and how to look."""

    ok: bool
    summary: list[str]
    look: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Scratch:
    """A demo's own project directory (with a ``poli.toml``) and tmux socket.

    The ``poli.toml`` names the socket, session and store, so that ``poli attach
    --project DIR`` and ``poli down --project DIR`` find a kept demo.
    """

    name: str
    root: pathlib.Path
    socket: str
    session: str

    @classmethod
    def make(cls, name: str, *, session: str | None = None) -> Scratch:
        """A fresh private directory (0700) under the temp dir, and a socket of its own."""
        root = pathlib.Path(tempfile.mkdtemp(prefix=f"poli-demo-{name}-")).resolve()
        return cls(name, root, f"poli-demo-{name}-{os.getpid()}", session or f"demo-{name}")

    def write_config(self, extra: str = "") -> pathlib.Path:
        """Write the project's ``poli.toml``: socket, session, store, then ``extra``."""
        path = self.root / "poli.toml"
        # A JSON string is a valid TOML basic string.
        text = (
            f"[tmux]\nsocket = {json.dumps(self.socket)}\nsession = {json.dumps(self.session)}\n\n"
            f'[store]\npath = "runs.sqlite3"\n\n{extra}'
        )
        write_private(path, text)
        return path

    def keep_lines(self, *, down_args: str = "") -> list[str]:
        """The exact commands to look at a kept demo and to tear it down."""
        where = shlex.quote(str(self.root))
        return [
            f"kept in {self.root}",
            f"  look:      poli attach --project {where}",
            f"  tear down: poli down --project {where}{down_args} && rm -rf {where}",
        ]

    async def remove(self) -> None:
        """Stop the demo's tmux servers (socket files and configs too) and delete the dir."""
        await self.host().kill_servers()
        shutil.rmtree(self.root, ignore_errors=True)

    def host(self, session: str | None = None) -> Host:
        """The demo's terminal host: its session (or ``session``) on its private server."""
        return Host.at(self.socket, session or self.session)
