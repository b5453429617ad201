"""The live state both views share: the overview, kept fresh by events, and pane mirrors.

:class:`LiveState` recomputes the overview when the run store changes (inotify, confirmed by
``PRAGMA data_version``) or the driver's :class:`~politerm.driver.observer.Observer`
announces a session, window or pane change or an agent's exit, and tells its listeners.
Mirrors come from the same observer. Nothing here wakes up on a timer of its own, and
nothing here talks to tmux: the observer is the views' one door to the agents.

The pane list (one ``list-panes -a``, work for the tmux server that grows with the number of
panes) is read again when the observer announces a change; a store change alone reuses it
unless it is older than :data:`PANES_MAX_AGE` (its pane activity times are that fresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import typing as t

from politerm._internal.aio import listen
from politerm.driver.observer import Observer
from politerm.driver.panes import PaneEntry, find
from politerm.engine.placement import here_config
from politerm.errors import PaneNotFound, StoreError, UiError
from politerm.project import project_key
from politerm.redact import ChunkRedactor, Redactor
from politerm.store import RunStore
from politerm.store.watch import StoreWatch, changed_since
from politerm.ui.overview import Cleaner, FleetRows, collect_overview
from politerm.ui.projects import ProjectRef, home_ref

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Callable

    from politerm.config import Config
    from politerm.driver.mirror import Mirror, Sink
    from politerm.driver.observer import Change
    from politerm.engine.fleetboard import BoardFeed
    from politerm.fleet.queue import WorkQueue
    from politerm.ui.actions import ApprovalRef

log = logging.getLogger(__name__)

Listener = t.Callable[[dict[str, t.Any]], None]

PANES_MAX_AGE = 2.0
"""Seconds a store change may reuse the pane list read before it (see the module's text)."""

MIN_REFRESH = 0.1
"""Seconds between two refreshes: the store changes of a burst (a handoff commits several
within milliseconds) make one more refresh, not one each. A refresh rebuilds the overview
of every agent, 500 rows at 500 agents; a change after a quiet spell shows at once."""

HOLD_BACK = 0.03
"""Longest a mirror holds an unfinished line back waiting for the rest of a secret."""


class LiveState:
    """The overview and the panes of one project, kept fresh by events.

    Parameters
    ----------
    config
        The project's configuration (tmux socket, redaction patterns).
    store
        The project's run store.
    project
        The project directory (for its pipeline runs).
    others
        The other projects shown (:func:`politerm.ui.projects.user_projects`): their stores
        are opened and followed too; none when the view is scoped to one project.
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        *,
        project: pathlib.Path | None = None,
        observer: Observer | None = None,
        others: t.Sequence[ProjectRef] = (),
    ) -> None:
        self.config = config
        self.store = store
        self.project = project
        self.redactor = Redactor(config.redact.patterns)
        self.cleaner = Cleaner(self.redactor)
        self.observer = observer or Observer.of(config)
        self.panes: list[PaneEntry] = []
        self.home = (
            home_ref(config)
            if project is None
            else ProjectRef(project_key(project), project, store.path)
        )
        self.others = list(others)
        self.stores: dict[str, RunStore] = {}
        self.overview: dict[str, t.Any] = {}
        self.refreshes = 0
        self._listeners: list[Listener] = []
        self._followed: set[tuple[str, str]] = set()  # (socket, session)
        self._unhook: list[Callable[[], None]] = []
        self._watch = StoreWatch(store.path)
        self._seen = -1
        self._watches: list[StoreWatch] = []
        self._dirty = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self.panes_max_age = PANES_MAX_AGE
        self.min_refresh = MIN_REFRESH
        self.pane_listings = 0
        """How many times the pane list was read from tmux."""
        self._panes_at: float | None = None  # when; None: tmux announced a change since
        self._recheck: asyncio.TimerHandle | None = None
        self.board: BoardFeed | None = None
        """The fleet's agents (``[fleet]``), followed from the agents' board."""
        self._queue: WorkQueue | None = None

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Read everything once, then follow store and tmux events."""
        await self._watch.start()
        self._seen = self.store.data_version()
        self._unhook.append(self._watch.subscribe(self._on_store))
        self._unhook.append(self.observer.listen(self._on_change))
        for ref in list(self.others):
            try:
                # As it is: a view must not create or migrate another project's store.
                other = RunStore.open_existing(ref.store_path)
            except StoreError as exc:
                log.warning("not showing project %s: %s", ref.name, exc)
                self.others.remove(ref)
                continue
            self.stores[ref.key] = other
            watch = StoreWatch(ref.store_path)
            await watch.start()
            self._watches.append(watch)
            # Only other processes write there: any change counts.
            self._unhook.append(watch.subscribe(self._dirty.set))
        if self.config.fleet is not None:
            from politerm.engine.fleetboard import BoardFeed, open_board

            self._queue, board = open_board(self.config, self.store)
            self.board = BoardFeed(board, self.config.fleet.heartbeat)
            await self.board.start()
            self._unhook.append(self.board.listen(lambda _names: self._dirty.set()))
        await self._refresh()
        self._refresher = asyncio.create_task(self._refresh_loop(), name="poli-ui-refresh")

    async def close(self) -> None:
        """Stop following events and close the observer."""
        await self._watch.close()
        for watch in self._watches:
            await watch.close()
        for other in self.stores.values():
            other.close()
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        for undo in self._unhook:
            undo()
        self._unhook.clear()
        if self.board is not None:
            await self.board.close()
            self.board = None
        if self._queue is not None:
            self._queue.conn.close()
            self._queue = None
        await self.observer.close()
        self._followed.clear()

    async def __aenter__(self) -> t.Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- listeners ------------------------------------------------------------------------

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with the new overview after each refresh; returns the undo."""
        return listen(self._listeners, listener)

    def poke(self) -> None:
        """Ask for a refresh (after this process wrote to the store itself)."""
        self._dirty.set()

    def _on_store(self) -> None:
        # This process's own writes wake the watch too; only other processes' commits count
        # (own actions call poke()).
        changed, self._seen = changed_since(self.store, self._seen)
        if changed:
            self._dirty.set()

    async def _refresh_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self._refresh()
            except Exception:
                log.exception("refreshing the overview failed")
            await asyncio.sleep(self.min_refresh)  # changes meanwhile: one refresh after

    async def _refresh(self) -> None:
        now = time.monotonic()
        if self._panes_at is None or now - self._panes_at >= self.panes_max_age:
            self._panes_at = now
            self.panes = await self.observer.panes()
            self.pane_listings += 1
            await self._follow_sessions()
        elif self._recheck is None:
            # What the store change was about may be a pane tmux does not announce (a new
            # session before any connection follows it, a pane that died): look once more
            # when the list is old enough.
            wait = self.panes_max_age - (now - self._panes_at)
            self._recheck = asyncio.get_running_loop().call_later(wait, self._rechecked)
        self.overview = collect_overview(
            self.store,
            self.panes,
            project=self.project,
            loop_session=self.config.tmux.session,
            cleaner=self.cleaner,
            home=self.home,
            others=[(ref, self.stores[ref.key]) for ref in self.others],
            fleet=self._fleet_rows(),
        )
        self.refreshes += 1
        for listener in list(self._listeners):
            try:
                listener(self.overview)
            except Exception:
                log.exception("overview listener failed")

    def _fleet_rows(self) -> FleetRows | None:
        fleet = self.config.fleet
        if fleet is None or self.board is None:
            return None
        elsewhere = frozenset(here_config(self.config)[1])
        return FleetRows(fleet.node, elsewhere, self.board.snapshot(), self.board.asked())

    def remote_node(self, node: str | None) -> bool:
        """Whether ``node`` is another node of the fleet (its agents answer through Redis)."""
        fleet = self.config.fleet
        return fleet is not None and node is not None and node != fleet.node

    def approve_remote(self, ref: ApprovalRef, *, deny: bool, by: str) -> str:
        """Answer the question an agent of another node waits on, through its node.

        Blocks until the node took the answer (at most
        :data:`politerm.engine.fleetlink.ANSWER_WAIT`): call it in a thread.

        Raises
        ------
        StaleAction
            The question shown is not the open one any more.
        UiError
            This view follows no fleet.
        """
        if self._queue is None:
            msg = "this view follows no fleet: the agent's node cannot be reached"
            raise UiError(msg)
        from politerm.engine.fleetboard import approve_remote

        return approve_remote(
            self._queue, ref.agent, deny=deny, by=by, asked=ref.asked, command=ref.command
        )

    def answer_remote(self, task_id: str, question: str, text: str, *, by: str) -> str:
        """Answer a task another node's router runs, through the router holding the role.

        Blocks until that router took the answer (at most
        :data:`politerm.engine.fleetlink.ANSWER_WAIT`): call it in a thread.

        Raises
        ------
        StaleAction
            The task does not ask ``question`` any more.
        UiError
            This view follows no fleet, or the answer is empty.
        """
        if self._queue is None or self.config.fleet is None:
            msg = f"no task {task_id!r} here, and this view follows no fleet"
            raise UiError(msg)
        if not text.strip():
            msg = "the answer is empty"
            raise UiError(msg)
        from politerm.engine.fleetanswers import answer_task_remote

        return answer_task_remote(
            self._queue, task_id, text, by=by, lease=self.config.fleet.lease, question=question
        )

    def _rechecked(self) -> None:
        self._recheck = None
        self._dirty.set()

    async def _follow_sessions(self) -> None:
        for socket, session in {(p.socket, p.session) for p in self.panes} - self._followed:
            if await self.observer.follow(session, socket):
                self._followed.add((socket, session))
            else:
                log.info("not following session %s: it is gone", session)

    def _on_change(self, _change: Change) -> None:
        # Any change the observer announces (layout, an exit) may change the pane list.
        self._panes_at = None
        self._dirty.set()

    # --- the projects shown ---------------------------------------------------------------

    def project_of(self, key: str | None) -> tuple[RunStore, ProjectRef]:
        """The store and project an inbox item names (``None``: the view's own).

        Raises
        ------
        UiError
            The view does not show that project.
        """
        if key is None or key == self.home.key:
            return self.store, self.home
        for ref in self.others:
            if ref.key == key:
                return self.stores[ref.key], ref
        msg = f"this view does not show project {key!r}"
        raise UiError(msg)

    def config_of(self, key: str | None) -> Config:
        """The configuration of the project ``key`` (``None``: the view's own)."""
        _, ref = self.project_of(key)
        if ref is self.home or ref.root is None:
            return self.config
        from politerm.config import load_config

        return load_config(ref.root)

    # --- panes and mirrors -----------------------------------------------------------------

    def pane(self, name: str, pane_id: str | None = None) -> PaneEntry | None:
        """The pane of agent ``name`` or with id ``name`` (:func:`politerm.driver.panes.find`).

        With ``pane_id``, the pane of that id tagged ``name`` comes first: a pane id is
        unique on its own server only, and a session of many agents spans several.
        """
        if pane_id is not None:
            for p in self.panes:
                if p.pane_id == pane_id and (p.agent or "").upper() == name.upper():
                    return p
        return find(self.panes, name)

    async def mirror(
        self, name: str, sink: Sink, *, redact: bool = True, pane_id: str | None = None
    ) -> Mirror:
        """Start mirroring the pane ``name`` into ``sink`` (redacted unless told otherwise).

        ``pane_id``: the agent's pane id, as :meth:`pane` takes it.

        Raises
        ------
        PaneNotFound
            No such agent or pane on the server.
        """
        entry = self.pane(name, pane_id)
        if entry is None:
            self.panes = await self.observer.panes()
            entry = self.pane(name, pane_id)
        if entry is None:
            raise PaneNotFound(name, "no agent or pane of that name on the private server")
        if not redact:
            return await self.observer.mirror(entry, sink)
        out, cancel = self._redacting(sink)
        try:
            mirror = await self.observer.mirror(entry, out)
        except BaseException:
            cancel()
            raise
        mirror.initial = self.redact_bytes(mirror.initial)
        unsubscribe = mirror.stop

        def stop() -> None:
            # The held-back tail's flush must not reach a sink its owner has closed.
            unsubscribe()
            cancel()

        mirror.stop = stop
        return mirror

    def redact_bytes(self, data: bytes) -> bytes:
        """``data`` with secrets redacted; bytes that are not UTF-8 pass unchanged."""
        text = data.decode("utf-8", errors="surrogateescape")
        clean = self.redactor.redact(text)
        if clean == text:
            return data
        return clean.encode("utf-8", errors="surrogateescape")

    def _redacting(self, sink: Sink) -> tuple[Sink, Callable[[], None]]:
        # A secret can be cut in two by tmux's %output chunking: the stream redactor holds
        # the unfinished last line back until the next chunk or a short pause completes it.
        stream = ChunkRedactor(self.redactor)
        flush_at: asyncio.TimerHandle | None = None
        stopped = False

        def emit(text: str) -> None:
            if text and not stopped:
                sink(text.encode("utf-8", errors="surrogateescape"))

        def cancel() -> None:
            nonlocal stopped
            stopped = True
            if flush_at is not None:
                flush_at.cancel()

        def flush() -> None:
            nonlocal flush_at
            flush_at = None
            emit(stream.flush())

        def out(data: bytes) -> None:
            nonlocal flush_at
            emit(stream.feed(data.decode("utf-8", errors="surrogateescape")))
            if stream.pending and flush_at is None and not stopped:
                flush_at = asyncio.get_running_loop().call_later(HOLD_BACK, flush)

        return out, cancel
