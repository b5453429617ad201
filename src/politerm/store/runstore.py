"""The durable run store: every routing decision, written before it is acted on.

Each write method is one short ``BEGIN IMMEDIATE`` transaction, so a ``kill -9`` at any point
leaves either all of a call's effect or none of it. After the commit, the call appends one
line to the audit log. Reads see the latest committed state, including other processes'
writes (WAL mode lets ``poli status`` read while the router writes).

The store is one class made of a part per domain object: :class:`~politerm.store._core.
StoreCore` (connection, transactions, meta), :class:`~politerm.store.tasks.TaskRows`
(agents, tasks, expectations), :class:`~politerm.store.turnrows.TurnRows` (turns, on
:class:`~politerm.store.journal.JournalRows`: the journal of turns),
:class:`~politerm.store.messages.MessageRows` (messages); blocks and events live here.
"""

from __future__ import annotations

import typing as t

from politerm.store._rows import _block, _event, _json
from politerm.store._tables import insert, where
from politerm.store.messages import MessageRows
from politerm.store.models import Block, Event
from politerm.store.tasks import DEFAULT_AGENT_STATE, TaskField, TaskRows
from politerm.store.turnrows import TurnRows

if t.TYPE_CHECKING:
    from politerm.config import Config

__all__ = ["DEFAULT_AGENT_STATE", "PROJECT_ROOT_META", "RunStore", "TaskField"]

#: Meta key holding the directory of the project the store belongs to.
PROJECT_ROOT_META: t.Final = "project:root"


class RunStore(TaskRows, TurnRows, MessageRows):
    """Durable state of politerm runs: agents, tasks, messages, turns, blocks and events.

    Open with :meth:`open`; use as a context manager or call :meth:`close`. One instance is
    safe to share between threads; several instances (and processes) may open one file.

    Parameters
    ----------
    conn
        A connection prepared by :func:`politerm.store.db.connect`.
    path
        The store file.
    clock
        Source of timestamps; tests pass a fake one.
    """

    @classmethod
    def for_config(cls, config: Config) -> RunStore:
        """Open the store ``config`` names, redacting with its ``[redact]`` patterns too.

        The secrets it redacts are kept in the session's tmux server (see
        :mod:`politerm._internal.vault`), so another process can deliver the originals.
        Every workflow opens its store this way: a project's own patterns hold on every path.
        """
        from politerm._internal import vault
        from politerm.redact import Redactor

        store = cls.open(config.store.resolved_path())
        # The views of every project (politerm.ui.projects) find the directory here.
        root = str(config.project.root)
        if store.get_meta(PROJECT_ROOT_META) != root:
            store.set_meta(PROJECT_ROOT_META, root)
        vault.use_tmux(config.tmux.socket)
        if config.redact.patterns:
            store.set_redaction(Redactor(config.redact.patterns), vault.keep)
        return store

    # --- blocks ---------------------------------------------------------------------------

    def record_block(
        self,
        *,
        agent: str,
        task_id: str | None,
        type: str,
        msg_id: str | None,
        nonce: str | None,
        dedupe_key: str,
        header: t.Mapping[str, t.Any],
        body: str,
        accepted: bool,
        reason: str | None,
    ) -> bool:
        """Log a tagged block seen in ``agent``'s output.

        Returns
        -------
        bool
            False when a block with this ``dedupe_key`` and the same ``accepted`` verdict was
            recorded before (nothing is written).
        """
        said: dict[str, t.Any] = {"agent": agent, "task_id": task_id, "type": type}
        said |= {"msg_id": msg_id, "nonce": nonce, "dedupe_key": dedupe_key}
        said |= {"accepted": accepted, "reason": reason}
        values = said | {"header": _json(header), "body": body, "seen": self._clock()}
        with self._writing() as c:
            row = insert(c, "blocks", values, "ON CONFLICT (dedupe_key, accepted) DO NOTHING")
        if row is not None:
            self._audit.append("block.record", **said)
        return row is not None

    def list_blocks(self, task_id: str | None = None) -> list[Block]:
        """Return recorded blocks in the order seen, optionally for one task."""
        sql, args = where(task_id=task_id)
        return self._all(_block, f"SELECT * FROM blocks{sql} ORDER BY id", *args)

    # --- events ---------------------------------------------------------------------------

    def add_event(
        self,
        kind: str,
        *,
        task_id: str | None = None,
        agent: str | None = None,
        detail: str = "",
        data: dict[str, t.Any] | None = None,
    ) -> Event:
        """Append an entry to the timeline.

        Parameters
        ----------
        kind
            Short machine name, e.g. ``"task.started"``.
        task_id, agent
            What it concerns, if anything.
        detail
            One human-readable line.
        data
            Extra JSON-serialisable fields.
        """
        values = {"kind": kind, "task_id": task_id, "agent": agent, "detail": detail}
        with self._writing() as c:
            event = _event(insert(c, "events", values | {"ts": self._clock(), "data": _json(data)}))
        self._audit.append(
            "event.add",
            id=event.id,
            event=kind,
            task_id=task_id,
            agent=agent,
            detail=detail,
            data=event.data,
        )
        return event

    def list_events(
        self, task_id: str | None = None, limit: int = 100, *, after: int | None = None
    ) -> list[Event]:
        """Return events (optionally of one task), oldest first.

        Without ``after``: the latest ``limit``. With ``after``: the first ``limit`` whose id
        is greater (what a follower has not seen yet; one indexed range read).
        """
        sql, args = where(task_id=task_id)
        if after is None:
            sql = f"SELECT * FROM events{sql} ORDER BY id DESC LIMIT ?"
            return self._all(_event, sql, *args, limit)[::-1]
        sql = f"SELECT * FROM events{sql} {'AND' if sql else 'WHERE'} id > ? ORDER BY id LIMIT ?"
        return self._all(_event, sql, *args, after, limit)
