"""The private channel an agent's hooks report on: one append-only JSONL file per agent.

The file is created 0600 in a 0700 directory under the session's run directory before the
agent starts (:func:`create_channel`); the hook command (:mod:`politerm.hooks.emit`) appends
one receipt line per event. A file rather than a socket: a receipt written while no politerm
process listens (the router restarting after ``kill -9``) is still there to settle a
delivery from.

:class:`HookChannel` reads it from a byte offset: :meth:`~HookChannel.read` returns the new
receipts and a one-line error for each malformed line (never a traceback), and
:meth:`~HookChannel.event` gives an :class:`asyncio.Event` set when the file grows
(``watchfiles``: inotify on Linux), so waiters wake on a receipt, not on a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import shutil
import stat
import typing as t

from politerm._internal.private import FILE_MODE, private_dir
from politerm.errors import HookError, HookLineError
from politerm.hooks.events import HookEvent, parse_line
from politerm.hooks.install import return_gemini_state

if t.TYPE_CHECKING:
    from politerm.config import Config

log = logging.getLogger(__name__)

CHANNEL_SUFFIX: t.Final = ".hooks.jsonl"
_MAX_LINE = 64 << 10  # a longer "line" is not a receipt


def hooks_dir_for(config: Config) -> pathlib.Path:
    """A session's hooks directory: beside its run store, named by socket and session.

    Examples
    --------
    >>> from politerm.config import Config, StoreConfig
    >>> cfg = Config(store=StoreConfig(path=pathlib.Path("/s/runs.sqlite3")))
    >>> str(hooks_dir_for(cfg))
    '/s/hooks/poli-poli'
    """
    store = config.store.resolved_path()
    return store.parent / "hooks" / f"{config.tmux.socket}-{config.tmux.session}"


def remove_hooks_dir(directory: pathlib.Path) -> bool:
    """Remove a session's hooks directory once the session is over; True if it was there.

    Its receipts and the CLIs' session settings are kept while the session lives (a resume
    reads them) and go with it. Only a real directory of this user is removed, never what
    a symlink points to (a Gemini session home links the user's own files); what Gemini CLI
    made in a session home is moved to the user's ``.gemini`` first
    (:func:`~politerm.hooks.install.return_gemini_state`).

    Raises
    ------
    HookError
        It is not a directory of this user, or a part of it cannot be removed.
    """
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    except OSError as exc:
        msg = f"hooks directory {directory}: {exc.strerror or exc}"
        raise HookError(msg) from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        msg = f"hooks directory {directory} is not a directory of this user: left alone"
        raise HookError(msg)
    try:
        # Gemini CLI's chats and history made in a session home are the user's to keep.
        for home in sorted(directory.glob("*.gemini-home")):
            return_gemini_state(home)
        shutil.rmtree(directory)
    except OSError as exc:
        msg = f"cannot remove the hooks directory {directory}: {exc.strerror or exc}"
        raise HookError(msg) from None
    return True


def channel_path(directory: pathlib.Path, agent: str) -> pathlib.Path:
    """Where agent ``agent``'s receipts go in ``directory``.

    Examples
    --------
    >>> str(channel_path(pathlib.Path("/run/s"), "PLANNER"))
    '/run/s/PLANNER.hooks.jsonl'
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent) or "agent"
    return directory / f"{safe}{CHANNEL_SUFFIX}"


def create_channel(directory: pathlib.Path, agent: str) -> pathlib.Path:
    """Create (or keep) ``agent``'s channel file, 0600, in ``directory`` made 0700.

    Raises
    ------
    HookError
        The directory or file cannot be made private (another owner, a symlink).
    """
    try:
        private_dir(directory)
        directory.chmod(0o700)
        path = channel_path(directory, agent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
    except OSError as exc:
        msg = f"cannot create the hook channel for {agent} in {directory}: {exc.strerror or exc}"
        raise HookError(msg) from None
    return path


def check_private(path: pathlib.Path) -> None:
    """Raise :class:`HookError` unless ``path`` is a regular 0600 file of ours in a 0700 dir.

    A channel named by a pane option is only trusted once this holds.
    """
    try:
        st = os.lstat(path)
        dst = path.parent.stat()
    except OSError as exc:
        msg = f"hook channel {path}: {exc.strerror or exc}"
        raise HookError(msg) from None
    me = os.getuid()
    if not stat.S_ISREG(st.st_mode) or st.st_uid != me or st.st_mode & 0o077:
        msg = f"hook channel {path} is not a private file of this user (want mode 0600)"
        raise HookError(msg)
    if dst.st_uid != me or dst.st_mode & 0o077:
        msg = f"hook channel directory {path.parent} is not private (want mode 0700)"
        raise HookError(msg)


class HookChannel:
    """Reads an agent's receipts from its channel file.

    Parameters
    ----------
    path
        The channel file.
    offset
        Where to start reading (default: its current end, so only new receipts are seen).
    """

    def __init__(self, path: pathlib.Path, *, offset: int | None = None) -> None:
        self.path = path
        self.offset = self.size() if offset is None else offset
        self.line_no = 0
        self.errors: list[str] = []
        self._event: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"HookChannel({self.path}, offset={self.offset})"

    def size(self) -> int:
        """The file's size now (0 when it is missing)."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def read(self) -> list[HookEvent]:
        """The complete receipt lines written since the last read.

        A malformed line is skipped; its one-line error is kept in :attr:`errors` and
        logged. A partial last line (a writer mid-way) is left for the next read.
        """
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError as exc:
            self._error(f"{self.path}: cannot read the hook channel: {exc.strerror or exc}")
            return []
        out: list[HookEvent] = []
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                if len(data) - pos > _MAX_LINE:  # no writer leaves this much unfinished
                    self.line_no += 1
                    self._error(f"{self.path}:{self.line_no}: line too long to be a receipt")
                    pos = len(data)
                break
            raw = data[pos:nl]
            pos = nl + 1
            self.line_no += 1
            if not raw.strip():
                continue
            where = f"{self.path}:{self.line_no}"
            try:
                out.append(parse_line(raw, where=where, offset=self.offset + pos))
            except HookLineError as exc:
                self._error(str(exc))
        self.offset += pos
        return out

    def _error(self, text: str) -> None:
        self.errors.append(text)
        log.warning("%s", text)

    # --- waking -------------------------------------------------------------------------

    def event(self) -> asyncio.Event:
        """An event set the next time the file is written (the watcher starts on first use)."""
        if self._watcher is None or self._watcher.done():
            self._stop = asyncio.Event()
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        if self._event is None or self._event.is_set():
            self._event = asyncio.Event()
        return self._event

    async def _watch(self) -> None:
        import watchfiles

        target = str(self.path)
        assert self._stop is not None
        with contextlib.suppress(Exception):  # a watcher that fails leaves the backstops
            async for _changes in watchfiles.awatch(
                self.path.parent,
                watch_filter=lambda _c, p: p == target,
                stop_event=self._stop,
                step=20,
                debounce=200,
                recursive=False,
            ):
                if self._event is not None:
                    self._event.set()

    async def close(self) -> None:
        """Stop the watcher."""
        if self._stop is not None:
            self._stop.set()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
        self._watcher = None
