"""Panes of the private tmux server and the programs running in them.

The original protocol finds a worker's pane by walking each pane's ``pane_pid`` process tree
for the program's name; :func:`find_panes_running` does that, and :func:`list_panes` is what
``poli panes --json`` prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing as t

import psutil

from politerm._internal.proctree import process_tree
from politerm.errors import TmuxLookupError

if t.TYPE_CHECKING:
    from politerm.tmux.server import TmuxServer

_FORMAT: t.Final = (
    "#{pane_id}\t#{pane_pid}\t#{session_name}\t#{window_name}\t#{pane_dead}"
    "\t#{pane_current_command}\t#{@poli_agent}"
)


@dataclasses.dataclass(frozen=True)
class PaneProcesses:
    """One pane: where it is, which politerm agent owns it, and what runs in it."""

    pane_id: str
    pid: int
    session: str
    window: str
    dead: bool
    current_command: str
    agent: str | None
    programs: tuple[str, ...]

    def runs(self, program: str) -> bool:
        """Whether ``program`` (a process name or an argv[0] base name) runs in the pane.

        Examples
        --------
        >>> p = PaneProcesses("%1", 1, "s", "w", False, "node", None, ("sh", "claude"))
        >>> p.runs("claude"), p.runs("codex")
        (True, False)
        """
        return program in self.programs

    def to_json(self) -> dict[str, t.Any]:
        """A JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["programs"] = list(self.programs)
        return out


def command_names(cmdline: t.Sequence[str]) -> list[str]:
    """The names a command line runs under: argv[0], and the script or ``-m`` module it runs.

    Interpreters run agents (``node …/claude``, ``python -m politerm.testing.fakeagent``).

    Examples
    --------
    >>> command_names(["/usr/bin/node", "/opt/lib/claude/cli.js", "--x"])
    ['node', 'cli.js']
    >>> command_names(["python3", "-m", "politerm.testing.fakeagent", "--mode", "claude"])
    ['python3', 'politerm.testing.fakeagent']
    >>> command_names(["claude", "--resume"])
    ['claude']
    """
    if not cmdline:
        return []
    names = [cmdline[0].rsplit("/", 1)[-1]]
    args = list(cmdline[1:])
    if args[:1] == ["-m"] and len(args) > 1:
        names.append(args[1])
    elif args and not args[0].startswith("-"):
        names.append(args[0].rsplit("/", 1)[-1])
    return names


def programs_of(pid: int) -> tuple[str, ...]:
    """Names of every process in ``pid``'s tree (process names and :func:`command_names`)."""
    names: list[str] = []
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            for name in (proc.name(), *command_names(proc.cmdline())):
                if name and name not in names:
                    names.append(name)
    return tuple(names)


async def list_panes(server: TmuxServer) -> list[PaneProcesses]:
    """Every pane of the server with its process tree's program names.

    Raises
    ------
    TmuxLookupError
        tmux did not answer (an empty list means the server runs no panes or is not up).
    """
    rc, out, err = await server.run("list-panes", "-a", "-F", _FORMAT)
    if rc != 0:
        if "no server" in err or "error connecting" in err:
            return []
        msg = f"tmux list-panes on socket {server.socket_name!r} failed: {err.strip()}"
        raise TmuxLookupError(msg)
    panes: list[PaneProcesses] = []
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) < 7 or not fields[1].isdigit():
            continue
        pid = int(fields[1])
        panes.append(
            PaneProcesses(
                pane_id=fields[0],
                pid=pid,
                session=fields[2],
                window=fields[3],
                dead=fields[4] == "1",
                current_command=fields[5],
                agent=fields[6] or None,
                programs=() if fields[4] == "1" else programs_of(pid),
            )
        )
    return panes


async def find_panes_running(server: TmuxServer, program: str) -> list[PaneProcesses]:
    """The live panes whose process tree runs ``program``, in tmux's order."""
    return [p for p in await list_panes(server) if not p.dead and p.runs(program)]
