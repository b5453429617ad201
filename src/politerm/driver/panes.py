"""Which panes exist on the private server, and which agent runs in each.

Every workflow starts its agents through :class:`politerm.driver.host.Host`, which tags the
pane with ``@poli_agent``. One ``list-panes -a`` in :data:`FORMAT` therefore finds every
agent of every session (:meth:`politerm.driver.observer.Observer.panes` runs it when a view
starts and when tmux announces a session or window change, never on a timer); this module
reads its answer.
"""

from __future__ import annotations

import dataclasses
import os
import typing as t

FORMAT = "\t".join(  # noqa: FLY002  # one field a line reads better
    (
        "#{session_name}",
        "#{window_name}",
        "#{pane_id}",
        "#{@poli_agent}",
        "#{pane_dead}",
        "#{pane_current_command}",
        "#{pane_width}",
        "#{pane_height}",
        "#{window_activity}",
        "#{@poli_project}",
    )
)


@dataclasses.dataclass(frozen=True)
class PaneEntry:
    """One pane of the private server."""

    session: str
    window: str
    pane_id: str
    agent: str
    dead: bool
    command: str
    width: int
    height: int
    activity: float
    project: str = ""
    #: Its server when not the configured one (a shard of a session with many agents).
    socket: str = ""

    @property
    def label(self) -> str:
        """The agent's name, or ``session:window`` for a pane without one."""
        return self.agent or f"{self.session}:{self.window}"


def parse_panes(text: str, socket: str = "") -> list[PaneEntry]:
    r"""Parse ``list-panes -a`` output in :data:`FORMAT` (of the server on ``socket``).

    Examples
    --------
    >>> [p] = parse_panes("poli\tPLANNER\t%1\tPLANNER\t0\tpython\t80\t24\t17\t/src/a\n")
    >>> (p.session, p.pane_id, p.label, p.dead, p.width, p.project)
    ('poli', '%1', 'PLANNER', False, 80, '/src/a')
    >>> parse_panes("garbage\n")
    []
    """
    out = []
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) != 10 or not f[2].startswith("%"):
            continue
        out.append(
            PaneEntry(
                session=f[0],
                window=f[1],
                pane_id=f[2],
                agent=f[3],
                dead=f[4] == "1",
                command=f[5],
                width=int(f[6] or 80),
                height=int(f[7] or 24),
                activity=float(f[8] or 0),
                project=f[9],
                socket=socket,
            )
        )
    return out


def mine(panes: t.Sequence[PaneEntry], project: str | None) -> list[PaneEntry]:
    r"""The panes of sessions that belong to ``project`` or to no project in particular.

    Examples
    --------
    >>> ps = parse_panes("a\tw\t%1\tA\t0\tsh\t80\t24\t0\t/p\n"
    ...                  "b\tw\t%2\tB\t0\tsh\t80\t24\t0\t/q\n"
    ...                  "c\tw\t%3\tC\t0\tsh\t80\t24\t0\t\n")
    >>> [p.agent for p in mine(ps, "/p")], len(mine(ps, None))
    (['A', 'C'], 3)
    """
    if project is None:
        return list(panes)
    return [p for p in panes if p.project in ("", project)]


def find(panes: t.Sequence[PaneEntry], name: str) -> PaneEntry | None:
    r"""The pane of agent ``name`` (case-insensitive), or the pane with id ``name``.

    Examples
    --------
    >>> ps = parse_panes("s\tw\t%3\tEXECUTER\t0\tsh\t80\t24\t0\t\n")
    >>> find(ps, "executer").pane_id, find(ps, "%3").agent, find(ps, "nobody")
    ('%3', 'EXECUTER', None)
    """
    for p in panes:
        if p.pane_id == name or (p.agent and p.agent.upper() == name.upper()):
            return p
    return None


def attach_argv(socket: str, pane_id: str) -> list[str]:
    """The tmux command that shows ``pane_id`` of the private server in this terminal.

    Examples
    --------
    >>> attach_argv("poli", "%3")  # doctest: +NORMALIZE_WHITESPACE
    ['tmux', '-L', 'poli', 'select-window', '-t', '%3', ';', 'select-pane', '-t', '%3', ';',
     'attach-session', '-t', '%3']
    """
    return [
        "tmux", "-L", socket, "select-window", "-t", pane_id, ";",
        "select-pane", "-t", pane_id, ";", "attach-session", "-t", pane_id,
    ]  # fmt: skip


def attach_env() -> dict[str, str]:
    """The environment for a tmux client started from this process: not nested in tmux."""
    return {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
