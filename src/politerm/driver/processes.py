"""Panes of the private tmux server and the programs running in them.

The original protocol finds a worker's pane by walking each pane's ``pane_pid`` process tree
and matching the program as a piece of the command lines (``grep -F``);
:func:`find_panes_running` does that, and :func:`list_panes` is what ``poli panes --json``
prints (through :meth:`politerm.driver.observer.Observer.processes`).
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
    commands: tuple[str, ...] = ()
    """The full command lines of the pane's process tree (for matching; never printed)."""

    def runs(self, program: str) -> bool:
        """Whether ``program`` runs in the pane, matched as the original protocol does.

        ``program`` is a process name, an argv[0] base name, or any piece of a command line
        (the original greps the command lines with ``grep -F``): ``fakeagent`` finds
        ``python -m politerm.testing.fakeagent``. An empty ``program`` matches nothing.

        Examples
        --------
        >>> p = PaneProcesses("%1", 1, "s", "w", False, "node", None, ("sh", "claude"),
        ...                   ("sh -c claude", "node /opt/claude/cli.js --resume"))
        >>> p.runs("claude"), p.runs("codex"), p.runs("cli.js --res"), p.runs("")
        (True, False, True, False)
        """
        if not program:
            return False
        return program in self.programs or any(program in line for line in self.commands)

    def to_json(self) -> dict[str, t.Any]:
        """A JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["programs"] = list(self.programs)
        # command lines may carry a secret given as an argument: they stay for matching only
        del out["commands"]
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


def processes_of(pid: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(names, command lines)`` of every process in ``pid``'s tree.

    The names are process names and :func:`command_names`; a command line is its argv
    joined by spaces.
    """
    names: list[str] = []
    lines: list[str] = []
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            for name in (proc.name(), *command_names(cmdline)):
                if name and name not in names:
                    names.append(name)
            if cmdline:
                lines.append(" ".join(cmdline))
    return tuple(names), tuple(lines)


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
        programs, commands = ((), ()) if fields[4] == "1" else processes_of(pid)
        panes.append(
            PaneProcesses(
                pane_id=fields[0],
                pid=pid,
                session=fields[2],
                window=fields[3],
                dead=fields[4] == "1",
                current_command=fields[5],
                agent=fields[6] or None,
                programs=programs,
                commands=commands,
            )
        )
    return panes


async def find_panes_running(server: TmuxServer, program: str) -> list[PaneProcesses]:
    """The live panes whose process tree runs ``program``, in tmux's order."""
    return [p for p in await list_panes(server) if not p.dead and p.runs(program)]
