"""The agents' board: each node's agents as it last published them, for views on any node.

A process that drives agents (a node's ``poli node``, a router) publishes a row per agent
whenever one changes (state, what it works on, the question it waits on): one script sets
the rows in the project's board (a hash, ``NODE/AGENT`` → JSON) with Redis's time and
appends one entry naming them to the board's log (a capped stream), which watchers block
on; the entry carries up to :data:`INLINE_ROWS` rows themselves, so a watcher takes a
change in the one read that woke it (:meth:`Board.follow`). A row is small and bounded
(each text at most :data:`MAX_TEXT` characters) and redacted before it is sent, like
every payload.

A row says what its publisher last saw; whether that still holds is the publisher's beat's
to say: each publish (one at least every heartbeat interval) sets a key that expires after
:data:`~politerm.fleet.nodes.MISSED_BEATS` intervals, by Redis's clock. The rows of a
publisher whose beat expired — its process or machine died, or is cut off — read as
:data:`LOST`. The board and its log expire after the queue's ``keep`` without a change.

A router publishes in the same call the questions its tasks wait on (:class:`TaskAsk`, in
a sibling hash, ``NODE/TASK`` → the question, named in the log with :data:`ASKED` before),
and removes each once it is answered or its task ended, so that the views of every node
can list them; they too read as lost with their publisher's beat.
"""

from __future__ import annotations

import dataclasses
import json
import typing as t

from politerm.fleet import _scripts
from politerm.fleet.keys import check_name
from politerm.fleet.nodes import MISSED_BEATS
from politerm.fleet.work import to_json
from politerm.redact import map_strings

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from politerm.fleet.queue import WorkQueue

__all__ = [
    "ASKED",
    "LOST",
    "MAX_TEXT",
    "Board",
    "BoardRow",
    "TaskAsk",
    "ask_field",
    "asks_of",
    "field",
    "publisher",
    "rows_of",
]

MAX_TEXT: t.Final = 200
"""Longest text of a row (a question, a command): the board stays small whatever an agent asks."""

FOLLOW_COUNT: t.Final = 100
"""Most log entries one read of the log returns."""

LOST: t.Final = "node lost"
"""The state shown for an agent whose node stopped beating."""

LOG_MAXLEN: t.Final = 1000
"""About how many changes the board's log keeps (watchers only need the newest)."""

INLINE_ROWS: t.Final = 8
"""Most rows one log entry carries itself (a larger publish names them only): a follower
takes a change from the entry that woke it, and the log stays small."""


def field(node: str, agent: str) -> str:
    """The board's field of ``agent`` on ``node``.

    Examples
    --------
    >>> field("b", "EXECUTER")
    'b/EXECUTER'
    """
    return f"{node}/{agent}"


ASKED: t.Final = "?"
"""What the board's log puts before the field of a task's question (:func:`ask_field`)."""


def ask_field(node: str, task: str) -> str:
    """The field of task ``task``'s question, published by the router on ``node``.

    Examples
    --------
    >>> ask_field("a", "T-1")
    'a/T-1'
    """
    return f"{node}/{task}"


def _clip(text: t.Any) -> str:
    """``text`` as a string of at most :data:`MAX_TEXT` characters.

    Examples
    --------
    >>> _clip("x" * 300)[-3:], len(_clip("x" * 300))
    ('...', 200)
    """
    value = "" if text is None else str(text)
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 3] + "..."


@dataclasses.dataclass(frozen=True)
class BoardRow:
    """An agent as its node last published it, and whether that node is still alive."""

    agent: str
    node: str
    state: str
    """The agent's state as its node read it (:data:`LOST` when the node is lost)."""
    last_state: str
    """The state published, even when the node is lost."""
    since: float
    """When (epoch seconds, Redis's clock) the state last changed."""
    at: float
    """When (epoch seconds, Redis's clock) the row was last published."""
    turn: str | None
    """The task the agent works on."""
    profile: str
    approval: Mapping[str, t.Any] | None
    """The question it waits on: ``what``, ``command``, ``asked`` (None: none)."""
    lost: bool

    def to_json(self) -> dict[str, t.Any]:
        """The row as plain data."""
        data = dataclasses.asdict(self)
        data["approval"] = dict(self.approval) if self.approval is not None else None
        return data


@dataclasses.dataclass(frozen=True)
class TaskAsk:
    """A question a task waits on, as the router running it last published it."""

    task: str
    node: str
    """The node of the router that runs the task (the one that applies its answer)."""
    question: str
    """The question, clipped to :data:`MAX_TEXT` and redacted."""
    agent: str
    """The agent that asked (empty when the router did not know)."""
    asked: float
    """When (epoch seconds) the task began to wait, as its router's store has it."""
    at: float
    """When (epoch seconds, Redis's clock) it was last published."""
    lost: bool
    """Its router stopped beating: nobody there to take an answer."""

    def to_json(self) -> dict[str, t.Any]:
        """The question as plain data."""
        return dataclasses.asdict(self)


class Board:
    """The agents' board of a project (built over a :class:`WorkQueue`)."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self._publish = queue.conn.client.register_script(_scripts.BOARD)

    def publish(
        self,
        node: str,
        rows: Mapping[str, Mapping[str, t.Any]],
        *,
        role: str = "node",
        every: float = 5.0,
        asks: Mapping[str, Mapping[str, t.Any] | None] | None = None,
        full: bool = False,
    ) -> int:
        """Publish the rows of ``node``'s agents that changed (agent → row); Redis's ms time.

        A row holds ``state``, ``turn``, ``profile`` and ``approval`` (``what``,
        ``command``, ``asked``, or None); every text is clipped to :data:`MAX_TEXT` and
        redacted. The script adds Redis's time of the publish (``at``) and of the state's
        last change (``since``). One script call, whatever the count; with no rows it is
        the publisher's beat alone. ``role`` tells the publishers of one node apart (its
        ``node`` service, its ``router``); ``every`` is how often it publishes at least.

        ``asks``: task id → the question it waits on (``question``, ``agent``, ``asked``),
        or None once it waits on none; clipped and redacted as a row. ``full``: these are
        all the questions this publisher has open, any other it published is removed.
        """
        check_name("node", node)
        by = f"{node}:{role}"
        beat_ms = max(1, round(MISSED_BEATS * every * 1000))
        args: list[t.Any] = [
            node, round(self.queue.keep * 1000), LOG_MAXLEN, beat_ms, INLINE_ROWS, len(rows),
            1 if full else 0, by,
        ]  # fmt: skip
        for agent, row in sorted(rows.items()):
            check_name("agent", agent)
            approval = row.get("approval")
            bounded = {
                "agent": agent,
                "node": node,
                "by": by,
                "state": _clip(row.get("state")),
                "turn": None if row.get("turn") is None else _clip(row["turn"]),
                "profile": _clip(row.get("profile")),
                "approval": None
                if not approval
                else {
                    "what": _clip(approval.get("what")),
                    "command": _clip(approval.get("command")),
                    "asked": float(approval.get("asked") or 0.0),
                },
            }
            clean = map_strings(bounded, self.queue.redact)
            text = to_json(clean, f"the board row of {agent}")
            args += [field(node, agent), clean["state"], text]
        for task, ask in sorted((asks or {}).items()):
            args += [ask_field(node, task), "" if ask is None else self._ask(node, by, task, ask)]
        keys = self.queue.keys
        with self.queue.conn.talking(f"publishing node {node}'s agents"):
            return int(
                self._publish(
                    keys=[keys.board, keys.board_log, keys.board_beat(by), keys.board_asks],
                    args=args,
                )
            )

    def _ask(self, node: str, by: str, task: str, ask: Mapping[str, t.Any]) -> str:
        bounded = {
            "task": _clip(task),
            "node": node,
            "by": by,
            "question": _clip(ask.get("question")),
            "agent": _clip(ask.get("agent")),
            "asked": float(ask.get("asked") or 0.0),
        }
        clean = map_strings(bounded, self.queue.redact)
        return to_json(clean, f"the question of task {task}")

    def ask_records(self) -> list[dict[str, t.Any]]:
        """The tasks' questions as published, of every router (one round trip).

        A handful at most (the tasks waiting on a person): read whole.
        """
        with self.queue.conn.talking("reading the tasks' questions"):
            found = self.queue.conn.cmd.hgetall(self.queue.keys.board_asks)
        return [r for r in (_row(v, "task") for v in found.values() if v) if r is not None]

    def asks(self) -> list[TaskAsk]:
        """The questions tasks wait on, of every router, by node and task (two round trips)."""
        records = self.ask_records()
        return asks_of(records, self.alive({publisher(r) for r in records}))

    def rows(self, fields: Iterable[str] | None = None) -> list[BoardRow]:
        """The board's rows (those of ``fields`` only, when given), by node and agent.

        Two round trips: the rows, then whether their publishers still beat.
        """
        records = self.records(fields)
        return rows_of(records, self.alive({publisher(r) for r in records}))

    def records(self, fields: Iterable[str] | None = None) -> list[dict[str, t.Any]]:
        """The board's rows as published (those of ``fields`` only, when given).

        One round trip: the publishers' beats are not looked at (:meth:`alive`,
        :func:`rows_of`).
        """
        client = self.queue.conn.cmd
        keys = self.queue.keys
        wanted = None if fields is None else sorted(set(fields))
        with self.queue.conn.talking("reading the agents' board"):
            if wanted is None:
                found = client.hgetall(keys.board)
            elif not wanted:
                found = {}
            else:
                found = dict(zip(wanted, client.hmget(keys.board, wanted), strict=True))
        return [r for r in (_row(v) for v in found.values() if v) if r is not None]

    def alive(self, publishers: Iterable[str]) -> dict[str, bool]:
        """Whether each publisher (``NODE:ROLE``) still beats: one ``MGET`` of their beats."""
        names = sorted(set(publishers))
        if not names:
            return {}
        with self.queue.conn.talking("reading the board's beats"):
            beats = self.queue.conn.cmd.mget([self.queue.keys.board_beat(n) for n in names])
        return {n: beat is not None for n, beat in zip(names, beats, strict=True)}

    def last_change(self) -> str:
        """The id of the board log's newest entry (``0-0`` when it has none)."""
        with self.queue.conn.talking("reading the board's log"):
            last = self.queue.conn.cmd.xrevrange(self.queue.keys.board_log, count=1)
        return str(last[0][0]) if last else "0-0"

    def changes(self, after: str, block: float) -> tuple[str, set[str]]:
        """The fields changed after log entry ``after``; waits up to ``block`` s for one.

        Returns the newest entry's id (to pass next time) and the fields named since.
        """
        after, changed, _ = self.follow(after, block)
        return after, set(changed)

    def follow(
        self, after: str, block: float
    ) -> tuple[str, dict[str, dict[str, t.Any] | None], bool]:
        """The rows changed after log entry ``after``, as the log carries them; one round trip.

        Waits up to ``block`` s for a change. Returns the newest entry's id (to pass next
        time), each changed field with its newest row (None: the entry only named it — a
        large publish; read it with :meth:`rows`), and whether the read was cut at its count
        (more entries wait: read on at once).
        """
        client = self.queue.conn.cmd
        bound = min(block, self.queue.conn.timeout * 0.5)
        changed: dict[str, dict[str, t.Any] | None] = {}
        with self.queue.conn.talking("waiting for the agents' board"):
            got = client.xread(
                {self.queue.keys.board_log: after},
                count=FOLLOW_COUNT,
                block=max(1, round(bound * 1000)),
            )
        read = 0
        for _stream, entries in got or []:
            for entry, fields in entries:
                after, read = entry, read + 1
                for name in str(fields.get("fields", "")).split():
                    text = fields.get(f"row:{name}")
                    changed[name] = None if text is None else _row(text)
        return after, changed, read >= FOLLOW_COUNT


def publisher(raw: Mapping[str, t.Any]) -> str:
    """Who published a row: ``NODE:ROLE`` (a row of an older publisher: its node).

    Examples
    --------
    >>> publisher({"node": "b", "by": "b:router"}), publisher({"node": "b"})
    ('b:router', 'b')
    """
    return str(raw.get("by") or raw["node"])


def rows_of(records: Iterable[Mapping[str, t.Any]], alive: Mapping[str, bool]) -> list[BoardRow]:
    """Raw rows as :class:`BoardRow`, lost where their publisher's beat is not ``alive``."""
    out = [_board_row(r, not alive.get(publisher(r))) for r in records]
    return sorted(out, key=lambda r: (r.node, r.agent))


def asks_of(records: Iterable[Mapping[str, t.Any]], alive: Mapping[str, bool]) -> list[TaskAsk]:
    """Raw questions as :class:`TaskAsk`, lost where their publisher's beat is not ``alive``."""
    out = [
        TaskAsk(
            task=str(r["task"]),
            node=str(r["node"]),
            question=str(r.get("question") or ""),
            agent=str(r.get("agent") or ""),
            asked=float(r.get("asked") or 0.0),
            at=float(r.get("at") or 0) / 1000,
            lost=not alive.get(publisher(r)),
        )
        for r in records
    ]
    return sorted(out, key=lambda a: (a.node, a.task))


def _row(text: str, name: str = "agent") -> dict[str, t.Any] | None:
    """A row (or, with ``name`` ``task``, a question) as published; None: not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None  # written by another program: not shown, never a traceback
    if not isinstance(value, dict) or not value.get(name) or not value.get("node"):
        return None
    return value


def _board_row(raw: Mapping[str, t.Any], lost: bool) -> BoardRow:
    approval = raw.get("approval")
    state = str(raw.get("state") or "unknown")
    return BoardRow(
        agent=str(raw["agent"]),
        node=str(raw["node"]),
        state=LOST if lost else state,
        last_state=state,
        since=float(raw.get("since") or 0) / 1000,
        at=float(raw.get("at") or 0) / 1000,
        turn=None if raw.get("turn") is None else str(raw["turn"]),
        profile=str(raw.get("profile") or ""),
        approval=approval if isinstance(approval, dict) and not lost else None,
        lost=lost,
    )
