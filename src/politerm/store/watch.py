"""Store change notifications: wake on commits from any process, read only what changed.

A run store is written by several processes (the router, ``poli task``, ``poli answer``,
``poli abort``…). Readers that show or act on its state — ``poli status --watch``, the
control window, ``poli route``'s event printer, the router's tick, a dashboard — sleep on a
:class:`StoreWatch` instead of re-querying on a timer:

- the store's directory is watched for writes to the database file and its WAL, which
  every commit touches: with inotify on the event loop itself on Linux
  (:mod:`politerm._internal.inotify`), else with ``watchfiles``;
- :class:`StoreWatch` turns those into a change counter and an :class:`asyncio.Event` per
  generation, so any number of asyncio waiters wake on one file-system notification; it
  reports a burst only once a commit is visible (its own ``PRAGMA data_version`` moved),
  looking again for a while when it is not yet: a commit writes its WAL frames, then waits
  for ``fsync``, and only then publishes them, so under load the last write of a commit can
  come long before a reader could see it;
- :func:`changed_since` tells a reader whether *another* connection committed
  (``PRAGMA data_version``), so a process's own commits never wake it twice;
- :class:`EventCursor` reads only the timeline entries written after the last one it
  returned.

Typical use::

    async with StoreWatch(store.path) as watch:
        cursor = EventCursor(store)
        while True:
            for event in cursor.read():
                print(event)
            await watch.wait(timeout=30)

Idle cost: none on Linux — nothing wakes until a store file is written. Elsewhere (or
past the inotify watch limit), one ``watchfiles`` thread that wakes ``1000 / step_ms``
times a second for a few microseconds. No store query runs until a file changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import sqlite3
import typing as t

from politerm._internal.aio import listen, wait_event
from politerm._internal.inotify import watch_dir
from politerm.errors import StoreError

if t.TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    import anyio

    from politerm._internal.inotify import DirWatch
    from politerm.store.models import Event
    from politerm.store.runstore import RunStore

__all__ = [
    "EventCursor",
    "StoreWatch",
    "agents_with_work",
    "changed_since",
]

log = logging.getLogger(__name__)

STEP_MS: t.Final = 50
"""How long the watcher gathers a burst of writes before it reports it (milliseconds)."""

DEBOUNCE_MS: t.Final = 200
"""Upper bound on grouping a continuous stream of writes into one notification."""

RECHECK_MS: t.Final = (50, 100, 200, 400, 800, 1600, 3200)
"""When a burst of writes shows no new commit yet, look again after these pauses (ms).

The commit's ``fsync`` may still be running (seconds on a loaded disk); a burst that never
becomes a commit (a checkpoint) costs these few ``PRAGMA data_version`` reads, nothing more.
"""


def store_files(path: pathlib.Path) -> frozenset[str]:
    """The file names a commit to the store at ``path`` may write.

    Examples
    --------
    >>> sorted(store_files(pathlib.Path("/x/runs.sqlite3")))
    ['runs.sqlite3', 'runs.sqlite3-journal', 'runs.sqlite3-wal']
    """
    name = path.name
    return frozenset({name, f"{name}-wal", f"{name}-journal"})


class StoreWatch:
    """Wake asyncio waiters whenever the run store file is written, by any process.

    Parameters
    ----------
    path
        The store file (its directory must exist; the file need not yet).
    step_ms, debounce_ms
        A burst of writes is reported once, ``step_ms`` after its first write (so a
        stream of commits wakes readers at most ``1000 / step_ms`` times a second). The
        ``watchfiles`` fallback reports ``step_ms`` after a burst stops, and at least every
        ``debounce_ms`` while it goes on.

    Notes
    -----
    The watcher sees this process's own commits too; pair it with :func:`changed_since`
    when only other processes' commits matter.
    """

    def __init__(
        self,
        path: pathlib.Path,
        *,
        step_ms: int = STEP_MS,
        debounce_ms: int = DEBOUNCE_MS,
    ) -> None:
        self.path = pathlib.Path(path).absolute()
        self.step_ms = step_ms
        self.debounce_ms = debounce_ms
        self._names = store_files(self.path)
        self._event = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop: anyio.Event | None = None
        self._inotify: DirWatch | None = None
        self._gathering: asyncio.TimerHandle | None = None
        self._reader: sqlite3.Connection | None = None
        self._version: int | None = None
        self._rechecks = 0
        self.changes = 0
        """How many bursts of writes were seen since :meth:`start`."""

    async def __aenter__(self) -> t.Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def running(self) -> bool:
        """Whether the watcher is running."""
        return self._inotify is not None or (self._task is not None and not self._task.done())

    async def start(self) -> None:
        """Start watching (returns once the watcher is installed).

        Raises
        ------
        StoreError
            The store's directory does not exist.
        """
        if self.running:
            return
        self._version = self._read_version()
        if not self.path.parent.is_dir():
            msg = f"cannot watch run store {self.path}: no directory {self.path.parent}"
            raise StoreError(msg)
        try:
            self._inotify = watch_dir(self.path.parent, self._names, self._written)
        except FileNotFoundError:
            msg = f"cannot watch run store {self.path}: no directory {self.path.parent}"
            raise StoreError(msg) from None
        if self._inotify is not None:
            return  # installed before returning: no commit after this can be missed
        self._ready.clear()
        self._task = asyncio.create_task(self._run(), name=f"store-watch {self.path.name}")
        # awatch installs its watcher in a worker thread before the first step; give it one
        # step so a commit made right after start() is not missed.
        await asyncio.sleep(self.step_ms / 1000)

    async def close(self) -> None:
        """Stop the watcher (a ``watchfiles`` thread is waited for: at most one ``step_ms``)."""
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        if self._gathering is not None:
            self._gathering.cancel()
            self._gathering = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        task, self._task = self._task, None
        if task is None:
            return
        if self._stop is not None:
            self._stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    def event(self) -> asyncio.Event:
        """An event set by the next change (take it *before* reading the store)."""
        return self._event

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` (in the event loop) on every change; returns an unsubscribe."""
        return listen(self._listeners, callback)

    async def wait(
        self, timeout: float | None = None, *, event: asyncio.Event | None = None
    ) -> bool:
        """Wait for the next change (or the one ``event`` stands for); True if it came.

        ``timeout`` bounds the wait; ``None`` waits as long as it takes.
        """
        target = event or self._event
        if timeout is None:
            await target.wait()
            return True
        return await wait_event(target, timeout)

    def _written(self) -> None:
        # The first write of a burst starts the gathering; the rest of it joins in. A write
        # while we wait to look again starts a new burst: it must not wait out a long pause.
        if self._gathering is not None:
            if not self._rechecks:
                return
            self._gathering.cancel()
        self._rechecks = 0
        loop = asyncio.get_running_loop()
        self._gathering = loop.call_later(self.step_ms / 1000, self._gathered)

    def _gathered(self) -> None:
        self._gathering = None
        version = self._read_version()
        if version is None or version != self._version:
            self._version, self._rechecks = version, 0
            self._notify()
        elif self._rechecks < len(RECHECK_MS):
            # Written but nothing new to read yet: the commit may still be on its way.
            pause = RECHECK_MS[self._rechecks] / 1000
            self._rechecks += 1
            self._gathering = asyncio.get_running_loop().call_later(pause, self._gathered)
        else:
            self._rechecks = 0

    def _read_version(self) -> int | None:
        """The store's ``data_version`` seen by this watch's own connection; None: unknown.

        The watch never writes, so the number moves with every commit of any other
        connection, in this process or another. A store that does not exist yet (or cannot
        be read) gives None, which counts as a change.
        """
        try:
            if self._reader is None:
                uri = f"{self.path.as_uri()}?mode=rw"  # never creates the store
                self._reader = sqlite3.connect(uri, uri=True, check_same_thread=False)
            return int(self._reader.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            return None

    def _notify(self) -> None:
        self.changes += 1
        event, self._event = self._event, asyncio.Event()
        event.set()
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:  # one bad listener must not silence the others
                log.exception("store watch listener failed")

    async def _run(self) -> None:
        import anyio
        import watchfiles

        names = self._names

        def relevant(_change: watchfiles.Change, path: str) -> bool:
            return pathlib.Path(path).name in names

        self._stop = stop = anyio.Event()
        how: dict[str, t.Any] = {"step": self.step_ms, "debounce": self.debounce_ms}
        how |= {"watch_filter": relevant, "stop_event": stop, "recursive": False}
        try:
            # The store dir is ours (0700); a denied sibling must not kill the watcher.
            async for _changes in watchfiles.awatch(
                self.path.parent, ignore_permission_denied=True, **how
            ):
                self._written()
        except OSError as exc:
            # e.g. the inotify watch limit reached: fall back to watchfiles' own polling.
            log.warning("store watch: %s; polling %s instead", exc, self.path.parent)
            async for _changes in watchfiles.awatch(
                self.path.parent, force_polling=True, poll_delay_ms=250, **how
            ):
                self._written()


def changed_since(store: RunStore, seen: int) -> tuple[bool, int]:
    """Whether another connection committed since ``seen``; returns ``(changed, now)``.

    ``PRAGMA data_version`` only moves for other connections' commits, so a process never
    wakes itself. Start with ``seen = -1`` (anything counts as a change).
    """
    now = store.data_version()
    return now != seen, now


class EventCursor:
    """Read the store's timeline entries written after the last one returned.

    Parameters
    ----------
    store
        The run store.
    task_id
        Only this task's events.
    after
        Start after this event id; ``None`` starts after the newest existing event.
    """

    def __init__(
        self, store: RunStore, *, task_id: str | None = None, after: int | None = None
    ) -> None:
        self.store = store
        self.task_id = task_id
        if after is None:
            after = max((e.id for e in store.list_events(limit=1)), default=0)
        self.last = after

    def read(self, limit: int = 500) -> list[Event]:
        """The events written since the last call (oldest first, at most ``limit``)."""
        events = self.store.list_events(task_id=self.task_id, after=self.last, limit=limit)
        if events:
            self.last = events[-1].id
        return events


def agents_with_work(
    store: RunStore, agents: Collection[str], events: Iterable[Event] = ()
) -> set[str]:
    """Which of ``agents`` have something new to act on after another process's commit.

    An agent has work when a message waits to be sent to it, when the task of its open turn
    stopped being active (aborted, failed), or when one of the new ``events`` names it (an
    approval answered by ``poli approve``, an answer to its question). Every other agent
    loop keeps sleeping.
    """
    from politerm.store.models import SENDABLE_STATES

    wanted = set(agents)
    woken = {m.recipient for m in store.list_messages(state=SENDABLE_STATES)} & wanted
    woken.update(e.agent for e in events if e.agent in wanted)
    open_turns = [tn for tn in store.list_turns() if tn.agent in wanted - woken and tn.task_id]
    if open_turns:
        active = {tk.id for tk in store.list_tasks(active_only=True)}
        woken.update(tn.agent for tn in open_turns if tn.task_id not in active)
    return woken
