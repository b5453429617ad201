"""A tmux pane driven over the session's control-mode connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import secrets
import typing as t

import psutil

from politerm._internal.proctree import kill_processes, process_tree
from politerm.errors import ControlModeError, PaneNotFound, TmuxCommandError, TmuxError
from politerm.terminal import Snapshot, on_screen
from politerm.tmux._staging import staged

if t.TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    from politerm.tmux.control import ControlClient
    from politerm.tmux.server import TmuxServer

_NAMED_KEYS = frozenset(
    [
        "Enter",
        "Escape",
        "Tab",
        "BTab",
        "BSpace",
        "Space",
        "Up",
        "Down",
        "Left",
        "Right",
        "Home",
        "End",
        "PageUp",
        "PageDown",
        "PPage",
        "NPage",
        "DC",
        "IC",
        "KPEnter",
    ]
    + [f"F{i}" for i in range(1, 13)]
)
_MODIFIED = re.compile(r"^(?:[CMS]-)+(.+)$")
# A paste-end sequence inside the text would end bracketed paste early and turn the rest of
# the message into keystrokes; it is the one sequence message text may not carry.
_PASTE_END = b"\x1b[201~"

_INFO_FORMAT = "\t".join(  # noqa: FLY002  # one field a line reads better
    [
        "#{pane_id}",
        "#{pane_pid}",
        "#{pane_dead}",
        "#{pane_dead_status}",
        "#{pane_in_mode}",
        "#{pane_current_command}",
        "#{pane_width}",
        "#{pane_height}",
        "#{history_size}",
        "#{cursor_x}",
        "#{cursor_y}",
        "#{alternate_on}",
        "#{session_name}",
        "#{window_id}",
        "#{@poli_agent}",
        # Last: a title is free text and may itself hold a tab.
        "#{pane_title}",
    ]
)


def check_key(key: str) -> str:
    """Return ``key`` if it is a named key or a single character, else raise ValueError.

    Message text must never travel as keystrokes; only keys do.

    Examples
    --------
    >>> check_key("Enter"), check_key("C-c"), check_key("y"), check_key("F2")
    ('Enter', 'C-c', 'y', 'F2')
    >>> check_key("rm -rf ~")
    Traceback (most recent call last):
    ...
    ValueError: not a key name: 'rm -rf ~' (message text goes through paste, never send-keys)
    """
    base = key
    m = _MODIFIED.match(key)
    if m:
        base = m.group(1)
    if base in _NAMED_KEYS or (len(base) == 1 and base.isprintable()):
        return key
    msg = f"not a key name: {key!r} (message text goes through paste, never send-keys)"
    raise ValueError(msg)


def sanitize_paste(data: bytes) -> bytes:
    r"""Neutralise a bracketed-paste end marker hidden in message text.

    Examples
    --------
    >>> sanitize_paste(b"ok \x1b[201~rm -rf ~\r")
    b'ok [201~rm -rf ~\r'
    >>> sanitize_paste(b"plain")
    b'plain'
    """
    return data.replace(_PASTE_END, _PASTE_END[1:])


@dataclasses.dataclass(frozen=True)
class PaneInfo:
    """What tmux says about a pane right now."""

    pane_id: str
    pid: int
    dead: bool
    dead_status: int | None
    in_mode: bool
    current_command: str
    width: int
    height: int
    history_size: int
    cursor_x: int
    cursor_y: int
    alternate_on: bool
    session: str
    window_id: str
    agent: str
    title: str = ""

    @property
    def cursor_line(self) -> int:
        """Absolute line number of the cursor (history lines count from 0)."""
        return self.history_size + self.cursor_y


def _info_of(pane_id: str, lines: list[str]) -> PaneInfo:
    if not lines or not lines[0].startswith("%"):
        raise PaneNotFound(pane_id, "no pane info")
    return _parse_info(lines[0])


def _parse_info(line: str) -> PaneInfo:
    f = line.split("\t")
    return PaneInfo(
        pane_id=f[0],
        pid=int(f[1] or 0),
        dead=f[2] == "1",
        dead_status=int(f[3]) if f[3] else None,
        in_mode=f[4] == "1",
        current_command=f[5],
        width=int(f[6]),
        height=int(f[7]),
        history_size=int(f[8]),
        cursor_x=int(f[9]),
        cursor_y=int(f[10]),
        alternate_on=f[11] == "1",
        session=f[12],
        window_id=f[13],
        agent=f[14],
        title="\t".join(f[15:]),
    )


class Pane:
    """One pane, addressed by its stable id (``%N``).

    Parameters
    ----------
    client
        The control-mode connection of the pane's session.
    pane_id
        tmux pane id, e.g. ``%3``.
    server
        The server the pane runs on.
    """

    def __init__(self, client: ControlClient, pane_id: str, server: TmuxServer) -> None:
        if not pane_id.startswith("%"):
            msg = f"not a tmux pane id: {pane_id!r}"
            raise ValueError(msg)
        self.client = client
        self.pane_id = pane_id
        self.server = server

    def __repr__(self) -> str:
        return f"Pane({self.pane_id})"

    @property
    def name(self) -> str:
        """A display name (the pane id)."""
        return self.pane_id

    async def info(self) -> PaneInfo:
        """Current state of the pane.

        Raises
        ------
        PaneNotFound
            When the pane is gone.
        """
        lines = await self.client.cmd("display-message", "-p", "-t", self.pane_id, _INFO_FORMAT)
        return _info_of(self.pane_id, lines)

    async def pid(self) -> int | None:
        """The program's process id; None once it has exited (or the pane is gone)."""
        try:
            info = await self.info()
        except (PaneNotFound, ControlModeError):
            return None
        return info.pid if info.pid and not info.dead else None

    def host_gone(self) -> str | None:
        """Why the pane's tmux server went away; None while it is up."""
        return self.client.dead_reason

    def live_view(
        self, *, fields: t.Callable[[], Sequence[str]], on_interrupt: t.Callable[[], None]
    ) -> None:
        """None: the operator attaches to a pane with tmux."""

    async def is_alive(self) -> bool:
        """False when the pane is gone or its program has exited."""
        try:
            return not (await self.info()).dead
        except PaneNotFound:
            return False

    async def capture(
        self,
        *,
        escapes: bool = False,
        start: int | str | None = None,
        end: int | str | None = None,
        join: bool = True,
    ) -> list[str]:
        """Capture lines of the pane.

        Parameters
        ----------
        escapes
            Keep colours and attributes (``-e``).
        start, end
            Line range as tmux takes it (0 is the first visible line, negative numbers are
            history, ``"-"`` is the start of history / end of screen); default: the screen.
        join
            Join lines tmux wrapped itself (``-J``).
        """
        args = ["capture-pane", "-p", "-t", self.pane_id]
        if join:
            args.insert(2, "-J")
        if escapes:
            args.insert(2, "-e")
        if start is not None:
            args += ["-S", str(start)]
        if end is not None:
            args += ["-E", str(end)]
        return await self.client.cmd(*args)

    async def capture_history(self) -> list[str]:
        """The whole scrollback plus the screen."""
        return await self.capture(start="-", end="-")

    async def lines_from(self, snap: Snapshot, row: int) -> list[str]:
        """The lines from tmux row ``row`` (history rows, then screen rows) to the screen's end.

        Read off ``snap`` when that row is on it and no row of it is wrapped; else captured
        by tmux's own row numbers (``capture-pane -S``), so rows tmux wrapped and joined
        (``-J``) cannot shift the range.
        """
        window = on_screen(snap, row)
        if window is not None:
            return window
        return await self.capture(start=row - snap.history_size, end="-")

    def subscribe(self, callback: t.Callable[[bytes], None]) -> t.Callable[[], None]:
        """Call ``callback`` with each decoded output chunk of the pane; returns the remover."""
        return self.client.feeds.subscribe(self.pane_id, lambda _pane, data: callback(data))

    async def paste(self, data: bytes, *, bracketed: bool = True, keep_lf: bool = True) -> None:
        """Paste ``data`` into the pane through a uniquely named buffer.

        The text is staged in a private 0600 file (see :mod:`politerm.tmux._staging`),
        loaded with ``load-buffer`` and pasted with ``paste-buffer -d`` (bracketed with
        ``-p`` when the program asked for it) in one round trip over the control
        connection: no process is spawned, the text is never on a command line and never
        typed as keys.
        """
        buffer = f"poli-{secrets.token_hex(8)}"
        args = ["paste-buffer", "-d", "-b", buffer, "-t", self.pane_id]
        if bracketed:
            args.insert(1, "-p")
        if keep_lf:
            args.insert(1, "-r")
        with staged(sanitize_paste(data)) as path:
            try:
                await self.client.cmds(["load-buffer", "-b", buffer, str(path)], args, timeout=30.0)
            except PaneNotFound:
                with contextlib.suppress(TmuxCommandError):
                    await self.client.cmd("delete-buffer", "-b", buffer)
                raise

    async def send_keys(self, *keys: str) -> None:
        """Press named keys (``Enter``, ``Escape``, ``C-c``) or single characters."""
        for key in keys:
            check_key(key)
        await self.client.cmd("send-keys", "-t", self.pane_id, *keys)

    async def snapshot(self) -> Snapshot:
        """The screen, cursor and liveness now (the :class:`Terminal` view of the pane)."""
        # Both questions in one round trip (tmux answers them in the order written).
        info_out, lines = await self.client.cmds(
            ["display-message", "-p", "-t", self.pane_id, _INFO_FORMAT],
            ["capture-pane", "-p", "-J", "-t", self.pane_id],
        )
        info = _info_of(self.pane_id, info_out)
        return Snapshot(
            lines=tuple(lines),
            cursor_x=info.cursor_x,
            cursor_y=info.cursor_y,
            alive=not info.dead,
            exit_status=info.dead_status,
            history_size=info.history_size,
            in_mode=info.in_mode,
            alternate_screen=info.alternate_on,
            title=info.title,
            rows=info.height,
        )

    async def prepare_input(self) -> None:
        """Leave copy mode so pasted text and keys reach the program."""
        await self.leave_copy_mode()

    async def leave_copy_mode(self) -> None:
        """Quit copy mode (a person scrolling) so pasted text reaches the program."""
        if (await self.info()).in_mode:
            await self.client.cmd("copy-mode", "-q", "-t", self.pane_id)

    async def resize(self, width: int, height: int) -> None:
        """Resize the pane's window to ``width`` x ``height``."""
        info = await self.info()
        await self.client.cmd(
            "resize-window", "-t", info.window_id, "-x", str(width), "-y", str(height)
        )

    async def set_option(self, name: str, value: str) -> None:
        """Set a pane user option, e.g. ``@poli_agent``."""
        if not name.startswith("@"):
            msg = f"user options start with '@': {name!r}"
            raise ValueError(msg)
        await self.client.cmd("set-option", "-p", "-t", self.pane_id, name, value)

    async def get_option(self, name: str) -> str | None:
        """Read a pane user option; None when unset."""
        lines = await self.client.cmd("show-options", "-pqv", "-t", self.pane_id, name)
        return lines[0] if lines else None

    async def kill(self, *, grace: float = 3.0) -> None:
        """Kill the pane and its whole process tree, and verify every process is gone."""
        try:
            info = await self.info()
        except PaneNotFound:
            return
        procs = process_tree(info.pid) if info.pid else []
        with contextlib.suppress(PaneNotFound, TmuxCommandError):
            await self.client.cmd("kill-pane", "-t", self.pane_id)
        await asyncio.to_thread(kill_processes, procs, grace=grace, what=f"pane {self.pane_id}")

    async def respawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Start ``argv`` again in this (dead) pane, killing what ran there."""
        info = await self.info()
        procs = process_tree(info.pid) if info.pid and not info.dead else []
        args = ["respawn-pane", "-k", "-t", self.pane_id]
        if cwd is not None:
            args += ["-c", str(cwd)]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        await self.client.cmd(*args, *hide_tmux(argv))
        await asyncio.to_thread(kill_processes, procs, what=f"pane {self.pane_id}")
        # The respawn happened: a failure here loses only the views' notice of it.
        with contextlib.suppress(TmuxError):
            await self.client.respawned(self.pane_id)

    async def wait_output(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the pane's next output; True if it came."""
        return await self.client.feeds.wait(self.pane_id, timeout)

    def output_event(self) -> asyncio.Event:
        """Event set by the pane's next output (take it before looking at the screen)."""
        return self.client.feeds.event(self.pane_id)


HIDDEN_TMUX_VARS: t.Final = ("TMUX", "TMUX_PANE")
"""tmux variables a program politerm starts in a pane does not get."""

_HIDE: t.Final = ("env", *(arg for var in HIDDEN_TMUX_VARS for arg in ("-u", var)))


def hide_tmux(argv: Sequence[str]) -> list[str]:
    """Run ``argv`` without tmux's variables (``env`` execs it: same process, same name).

    A plain ``tmux`` command in a pane politerm started then does not reach politerm's
    private server (docs/messaging.md, "What agents see of tmux"). A single argument with
    a space is a shell command, as tmux itself would read it; no argument is tmux's shell.

    Examples
    --------
    >>> hide_tmux(["claude", "--x"])
    ['env', '-u', 'TMUX', '-u', 'TMUX_PANE', 'claude', '--x']
    >>> hide_tmux(hide_tmux(["claude"])) == hide_tmux(["claude"])
    True
    >>> hide_tmux(["claude --x"])[-3:], hide_tmux([])
    (['/bin/sh', '-c', 'claude --x'], [])
    """
    if not argv or tuple(argv[: len(_HIDE)]) == _HIDE:
        return list(argv)
    if len(argv) == 1 and " " in argv[0]:
        return [*_HIDE, "/bin/sh", "-c", argv[0]]
    return [*_HIDE, *argv]


async def new_window(
    client: ControlClient,
    server: TmuxServer,
    *,
    session: str,
    name: str,
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    agent: str | None = None,
    size: tuple[int, int] | None = None,
) -> Pane:
    """Open a window running ``argv`` in ``session`` and return its pane.

    ``agent`` is stored as the pane's ``@poli_agent`` user option so the pane can be found
    again after a restart; ``size`` (columns, rows) fixes the window's size.
    """
    args = ["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", f"={session}:", "-n", name]
    if cwd is not None:
        args += ["-c", str(cwd)]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    lines = await client.cmd(*args, *hide_tmux(argv))
    pane = Pane(client, lines[0].strip(), server)
    if agent:
        await pane.set_option("@poli_agent", agent)
    if size is not None:
        await pane.resize(*size)
    return pane


async def split_pane(
    target: Pane,
    *,
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    agent: str | None = None,
    horizontal: bool = True,
    percent: int | None = None,
) -> Pane:
    """Split ``target``'s pane and run ``argv`` in the new pane (side by side by default)."""
    args = ["split-window", "-d", "-P", "-F", "#{pane_id}", "-t", target.pane_id]
    args.insert(1, "-h" if horizontal else "-v")
    if percent is not None:
        args += ["-l", f"{percent}%"]
    if cwd is not None:
        args += ["-c", str(cwd)]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    lines = await target.client.cmd(*args, *hide_tmux(argv))
    pane = Pane(target.client, lines[0].strip(), target.server)
    if agent:
        await pane.set_option("@poli_agent", agent)
    return pane


async def find_agent_pane(client: ControlClient, server: TmuxServer, agent: str) -> Pane | None:
    """The pane whose ``@poli_agent`` is ``agent`` in the client's session, if any."""
    return (await agent_panes(client, server)).get(agent)


async def agent_panes(client: ControlClient, server: TmuxServer) -> dict[str, Pane]:
    """Every pane of the client's session that has an ``@poli_agent``, by agent name.

    One ``list-panes`` for the whole session: a caller that needs many agents' panes (a
    session coming up, attaching or going down) asks once, not once per agent, which would
    cost the server N listings of N panes. The first pane of a name wins, as
    :func:`find_agent_pane` has always answered.
    """
    lines = await client.cmd(
        "list-panes", "-s", "-t", f"={client.session}", "-F", "#{pane_id}\t#{@poli_agent}"
    )
    found: dict[str, Pane] = {}
    for line in lines:
        pane_id, _, name = line.partition("\t")
        if name and name not in found:
            found[name] = Pane(client, pane_id, server)
    return found


async def find_pane_running(client: ControlClient, server: TmuxServer, program: str) -> Pane | None:
    """The first pane of the server whose process tree runs ``program`` (name or argv[0])."""
    lines = await client.cmd("list-panes", "-a", "-F", "#{pane_id}\t#{pane_pid}")
    for line in lines:
        pane_id, _, pid = line.partition("\t")
        if not pid.isdigit():
            continue
        for proc in process_tree(int(pid)):
            try:
                cmdline = proc.cmdline()
                names = {proc.name(), *(cmdline[:1]), *(c.rsplit("/", 1)[-1] for c in cmdline[:2])}
            except psutil.Error:
                continue
            if program in names:
                return Pane(client, pane_id, server)
    return None
