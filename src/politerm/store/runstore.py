"""The durable run store: every routing decision, written before it is acted on.

Each write method is one short ``BEGIN IMMEDIATE`` transaction, so a ``kill -9`` at any point
leaves either all of a call's effect or none of it. After the commit, the call appends one
line to the audit log. Reads see the latest committed state, including other processes'
writes (WAL mode lets ``poli status`` read while the router writes).
"""

from __future__ import annotations

import contextlib
import enum
import json
import pathlib
import sqlite3
import threading
import time
import typing as t

from politerm.errors import StoreError
from politerm.store.audit import AuditLog, audit_path_for
from politerm.store.db import connect, default_store_path, user_version
from politerm.store.models import (
    SENDABLE_STATES,
    TERMINAL_TASK_STATES,
    Agent,
    Block,
    Event,
    Expectation,
    Message,
    MessageState,
    Task,
    TaskState,
    Turn,
    can_transition,
)

if t.TYPE_CHECKING:
    import types

DEFAULT_AGENT_STATE: t.Final = "starting"
"""State of an agent the store has not been told anything else about."""

TaskField = t.Literal["report", "error", "question"]


def _json(value: t.Mapping[str, t.Any] | None) -> str:
    return json.dumps(dict(value or {}), sort_keys=True, ensure_ascii=False)


def _load(raw: str) -> dict[str, t.Any]:
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def _text(value: str | enum.Enum) -> str:
    """Store an enum member by its value; ``str()`` of a ``str`` enum is its qualified name.

    Examples
    --------
    >>> _text(TaskState.DONE), _text("ready")
    ('done', 'ready')
    """
    return str(value.value) if isinstance(value, enum.Enum) else value


def _states(
    states: MessageState | t.Collection[MessageState],
) -> frozenset[MessageState]:
    """Normalise one state or a collection of states to a frozenset.

    Examples
    --------
    >>> sorted(s.value for s in _states(MessageState.QUEUED))
    ['queued']
    >>> sorted(s.value for s in _states([MessageState.DEAD, MessageState.QUEUED]))
    ['dead', 'queued']
    """
    if isinstance(states, MessageState):
        return frozenset({states})
    return frozenset(MessageState(s) for s in states)


def _agent(row: sqlite3.Row) -> Agent:
    return Agent(
        name=row["name"],
        session=row["session"],
        pane_id=row["pane_id"],
        command=row["command"],
        cwd=row["cwd"],
        profile=row["profile"],
        resume_command=row["resume_command"],
        env={str(k): str(v) for k, v in _load(row["env"]).items()},
        state=row["state"],
        created=row["created"],
        updated=row["updated"],
    )


def _task(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"],
        request=row["request"],
        state=TaskState(row["state"]),
        round=row["round"],
        max_rounds=row["max_rounds"],
        report=row["report"],
        error=row["error"],
        question=row["question"],
        created=row["created"],
        updated=row["updated"],
    )


def _expectation(row: sqlite3.Row) -> Expectation:
    return Expectation(
        task_id=row["task_id"],
        sender=row["sender"],
        type=row["type"],
        deadline=row["deadline"],
        nudged=bool(row["nudged"]),
        created=row["created"],
    )


def _turn(row: sqlite3.Row) -> Turn:
    return Turn(
        agent=row["agent"],
        nonce=row["nonce"],
        task_id=row["task_id"],
        message_id=row["message_id"],
        start_line=row["start_line"],
        started=row["started"],
    )


def _message(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        task_id=row["task_id"],
        sender=row["sender"],
        recipient=row["recipient"],
        type=row["type"],
        msg_id=row["msg_id"],
        nonce=row["nonce"],
        turn_nonce=row["turn_nonce"],
        body=row["body"],
        header=_load(row["header"]),
        text=row["text"],
        state=MessageState(row["state"]),
        attempts=row["attempts"],
        last_error=row["last_error"],
        evidence=row["evidence"],
        created=row["created"],
        updated=row["updated"],
        deadline=row["deadline"],
        dedupe_key=row["dedupe_key"],
    )


def _block(row: sqlite3.Row) -> Block:
    return Block(
        id=row["id"],
        agent=row["agent"],
        task_id=row["task_id"],
        type=row["type"],
        msg_id=row["msg_id"],
        nonce=row["nonce"],
        dedupe_key=row["dedupe_key"],
        header=_load(row["header"]),
        body=row["body"],
        accepted=bool(row["accepted"]),
        reason=row["reason"],
        seen=row["seen"],
    )


def _event(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        ts=row["ts"],
        kind=row["kind"],
        task_id=row["task_id"],
        agent=row["agent"],
        detail=row["detail"],
        data=_load(row["data"]),
    )


class _BatchedAudit:
    """The audit log, holding lines back while a batch is open (they follow its commit)."""

    def __init__(self, log: AuditLog) -> None:
        self._log = log
        self._held: list[tuple[str, dict[str, t.Any]]] | None = None

    @property
    def path(self) -> pathlib.Path:
        return self._log.path

    def append(self, kind: str, **fields: t.Any) -> None:
        if self._held is not None:
            self._held.append((kind, fields))
        else:
            self._log.append(kind, **fields)

    def hold(self) -> None:
        self._held = []

    def drop(self) -> None:
        self._held = None

    def release(self) -> None:
        held, self._held = self._held or [], None
        for kind, fields in held:
            self._log.append(kind, **fields)

    def close(self) -> None:
        self._log.close()


class RunStore:
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

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: pathlib.Path,
        *,
        clock: t.Callable[[], float] = time.time,
    ) -> None:
        self._conn = conn
        self._path = path
        self._clock = clock
        self._lock = threading.RLock()
        self._audit = _BatchedAudit(AuditLog(audit_path_for(path)))
        self._closed = False
        self._batch_depth = 0

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: pathlib.Path | None = None, *, clock: t.Callable[[], float] = time.time
    ) -> RunStore:
        """Open the store at ``path``, creating and migrating it as needed.

        Parameters
        ----------
        path
            The SQLite file; :func:`politerm.store.db.default_store_path` when omitted.
        clock
            Source of timestamps (float epoch seconds).

        Returns
        -------
        RunStore

        Raises
        ------
        SchemaTooNew
            The file was written by a newer politerm.
        StoreError
            The file is not a run store or cannot be opened.
        """
        path = pathlib.Path(path) if path is not None else default_store_path()
        return cls(connect(path), path, clock=clock)

    @property
    def path(self) -> pathlib.Path:
        """The store file."""
        return self._path

    @property
    def audit_path(self) -> pathlib.Path:
        """The JSONL audit log beside the store file."""
        return self._audit.path

    @property
    def schema_version(self) -> int:
        """The schema version of the open file (``PRAGMA user_version``)."""
        with self._reading():
            return user_version(self._conn)

    def close(self) -> None:
        """Close the connection and the audit log; further calls raise :class:`StoreError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._audit.close()

    def __enter__(self) -> t.Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self._path)!r})"

    # --- transactions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> t.Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_open()
            try:
                yield self._conn
            except sqlite3.Error as e:
                msg = f"run store {self._path}: read failed: {e}"
                raise StoreError(msg) from e

    @contextlib.contextmanager
    def _writing(self) -> t.Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction (or a part of the open :meth:`batch`).

        IMMEDIATE takes the write lock up front, so a read-then-write (compare-and-set) in
        the block cannot be invalidated by another process between the two.
        """
        with self.batch():
            yield self._conn

    @contextlib.contextmanager
    def batch(self) -> t.Iterator[None]:
        """Make every write inside one transaction: all of them commit, or none.

        The router writes one block's effects (forwarded message, task state, expectation,
        acknowledgement, end of turn) as one batch: one commit, one fsync, and after a
        ``kill -9`` either all of them are there or none. Audit lines are written after the
        commit; nested batches join the outer one.
        """
        with self._lock:
            self._check_open()
            if self._batch_depth:
                self._batch_depth += 1
                try:
                    yield
                finally:
                    self._batch_depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                msg = f"run store {self._path}: cannot start a write: {e}"
                raise StoreError(msg) from e
            self._batch_depth = 1
            self._audit.hold()
            try:
                yield
                self._conn.execute("COMMIT")
            except BaseException as e:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                self._audit.drop()
                if isinstance(e, sqlite3.Error):
                    msg = f"run store {self._path}: write failed: {e}"
                    raise StoreError(msg) from e
                raise
            finally:
                self._batch_depth = 0
            self._audit.release()

    def _check_open(self) -> None:
        if self._closed:
            msg = f"run store {self._path} is closed"
            raise StoreError(msg)

    def data_version(self) -> int:
        """A number that changes whenever another connection commits (``PRAGMA data_version``).

        The router checks it to notice new tasks, answers and aborts written by other
        ``poli`` processes without re-reading every table.
        """
        with self._reading() as conn:
            row = conn.execute("PRAGMA data_version").fetchone()
        return int(row[0])

    # --- meta -----------------------------------------------------------------------------

    def set_meta(self, key: str, value: str) -> None:
        """Set a free-form key to a string value."""
        with self._writing() as c:
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        self._audit.append("meta.set", key=key, value=value)

    def get_meta(self, key: str) -> str | None:
        """Return the value of ``key``, or None when unset."""
        with self._reading() as c:
            row = c.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    # --- agents ---------------------------------------------------------------------------

    def upsert_agent(
        self,
        name: str,
        *,
        session: str,
        pane_id: str,
        command: str,
        cwd: str,
        profile: str,
        resume_command: str | None,
        env: dict[str, str] | None = None,
    ) -> Agent:
        """Record where an agent runs, creating it or replacing its launch details.

        A new agent starts in state ``"starting"``; an existing one keeps its state.

        Returns
        -------
        Agent
            The row as stored.
        """
        now = self._clock()
        with self._writing() as c:
            row = c.execute(
                "INSERT INTO agents (name, session, pane_id, command, cwd, profile,"
                " resume_command, env, state, created, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET session = excluded.session,"
                " pane_id = excluded.pane_id, command = excluded.command, cwd = excluded.cwd,"
                " profile = excluded.profile, resume_command = excluded.resume_command,"
                " env = excluded.env, updated = excluded.updated"
                " RETURNING *",
                (
                    name,
                    session,
                    pane_id,
                    command,
                    cwd,
                    profile,
                    resume_command,
                    _json(env),
                    DEFAULT_AGENT_STATE,
                    now,
                    now,
                ),
            ).fetchone()
            agent = _agent(row)
        self._audit.append(
            "agent.upsert",
            name=name,
            session=session,
            pane_id=pane_id,
            command=command,
            cwd=cwd,
            profile=profile,
            resume_command=resume_command,
            env=agent.env,
        )
        return agent

    def get_agent(self, name: str) -> Agent | None:
        """Return the agent called ``name``, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM agents WHERE name = ?", (name,)).fetchone()
        return None if row is None else _agent(row)

    def list_agents(self) -> list[Agent]:
        """Return every agent, by name."""
        with self._reading() as c:
            rows = c.execute("SELECT * FROM agents ORDER BY name").fetchall()
        return [_agent(r) for r in rows]

    def set_agent_state(self, name: str, state: str) -> Agent:
        """Set an agent's state (an ``AgentState`` member or its value).

        Raises
        ------
        StoreError
            No agent is called ``name``.
        """
        value = _text(state)
        with self._writing() as c:
            row = c.execute(
                "UPDATE agents SET state = ?, updated = ? WHERE name = ? RETURNING *",
                (value, self._clock(), name),
            ).fetchone()
            if row is None:
                msg = f"run store {self._path}: no agent named {name!r}"
                raise StoreError(msg)
            agent = _agent(row)
        self._audit.append("agent.state", name=name, state=value)
        return agent

    # --- tasks ----------------------------------------------------------------------------

    def create_task(self, task_id: str, request: str, *, max_rounds: int) -> Task:
        """Create a task in state PENDING at round 0.

        Raises
        ------
        StoreError
            A task with that id exists.
        """
        now = self._clock()
        with self._writing() as c:
            try:
                row = c.execute(
                    "INSERT INTO tasks (id, request, state, round, max_rounds, created, updated)"
                    " VALUES (?, ?, ?, 0, ?, ?, ?) RETURNING *",
                    (task_id, request, TaskState.PENDING.value, max_rounds, now, now),
                ).fetchone()
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: task {task_id!r} exists"
                raise StoreError(msg) from e
            task = _task(row)
        self._audit.append("task.create", task_id=task_id, request=request, max_rounds=max_rounds)
        return task

    def get_task(self, task_id: str) -> Task | None:
        """Return the task, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else _task(row)

    def list_tasks(self, active_only: bool = False) -> list[Task]:
        """Return tasks oldest first; with ``active_only``, those not DONE/FAILED/ABORTED."""
        sql = "SELECT * FROM tasks"
        args: list[str] = []
        if active_only:
            sql += f" WHERE state NOT IN ({', '.join('?' * len(TERMINAL_TASK_STATES))})"
            args = [s.value for s in TERMINAL_TASK_STATES]
        with self._reading() as c:
            rows = c.execute(sql + " ORDER BY created, rowid", args).fetchall()
        return [_task(r) for r in rows]

    def update_task(
        self,
        task_id: str,
        *,
        state: TaskState | None = None,
        round: int | None = None,
        report: str | None = None,
        error: str | None = None,
        question: str | None = None,
        clear: t.Iterable[TaskField] = (),
    ) -> Task:
        """Change some fields of a task; None leaves a field as it is.

        Parameters
        ----------
        task_id
            The task.
        state, round, report, error, question
            New values for the fields given.
        clear
            Names among ``report``, ``error``, ``question`` to set back to null (e.g. the
            question once the user has answered).

        Raises
        ------
        StoreError
            No such task, or a field is both set and cleared.
        """
        changes: dict[str, t.Any] = {}
        if state is not None:
            changes["state"] = TaskState(state).value
        if round is not None:
            changes["round"] = round
        for name, value in (("report", report), ("error", error), ("question", question)):
            if value is not None:
                changes[name] = value
        for name in clear:
            if name not in ("report", "error", "question"):
                msg = f"cannot clear task field {name!r}"
                raise StoreError(msg)
            if name in changes:
                msg = f"task field {name!r} both set and cleared"
                raise StoreError(msg)
            changes[name] = None
        changes["updated"] = self._clock()
        assignments = ", ".join(f"{k} = ?" for k in changes)  # keys are our own names
        with self._writing() as c:
            row = c.execute(
                f"UPDATE tasks SET {assignments} WHERE id = ? RETURNING *",
                [*changes.values(), task_id],
            ).fetchone()
            if row is None:
                msg = f"run store {self._path}: no task {task_id!r}"
                raise StoreError(msg)
            task = _task(row)
        del changes["updated"]
        self._audit.append("task.update", task_id=task_id, **changes)
        return task

    # --- expectations ---------------------------------------------------------------------

    def set_expectation(
        self, task_id: str, *, sender: str, type: str, deadline: float, nudged: bool = False
    ) -> Expectation:
        """Record (replacing any previous one) what the router now waits for on a task.

        Parameters
        ----------
        task_id
            The task; it must exist.
        sender
            The agent expected to answer.
        type
            The block type expected from it.
        deadline
            Epoch seconds after which the router nudges or gives up.
        nudged
            Whether a nudge was already sent for this wait.
        """
        now = self._clock()
        with self._writing() as c:
            try:
                row = c.execute(
                    "INSERT INTO expectations (task_id, sender, type, deadline, nudged, created)"
                    " VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (task_id) DO UPDATE SET sender = excluded.sender,"
                    " type = excluded.type, deadline = excluded.deadline,"
                    " nudged = excluded.nudged, created = excluded.created"
                    " RETURNING *",
                    (task_id, sender, type, deadline, int(nudged), now),
                ).fetchone()
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: no task {task_id!r}"
                raise StoreError(msg) from e
            exp = _expectation(row)
        self._audit.append(
            "expectation.set",
            task_id=task_id,
            sender=sender,
            type=type,
            deadline=deadline,
            nudged=nudged,
        )
        return exp

    def get_expectation(self, task_id: str) -> Expectation | None:
        """Return what the router waits for on ``task_id``, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM expectations WHERE task_id = ?", (task_id,)).fetchone()
        return None if row is None else _expectation(row)

    def clear_expectation(self, task_id: str) -> bool:
        """Stop waiting on ``task_id``; return whether there was an expectation."""
        with self._writing() as c:
            n = c.execute("DELETE FROM expectations WHERE task_id = ?", (task_id,)).rowcount
        if n:
            self._audit.append("expectation.clear", task_id=task_id)
        return bool(n)

    def mark_nudged(self, task_id: str) -> Expectation:
        """Record that the expected sender was nudged.

        Raises
        ------
        StoreError
            Nothing is expected on ``task_id``.
        """
        with self._writing() as c:
            row = c.execute(
                "UPDATE expectations SET nudged = 1 WHERE task_id = ? RETURNING *", (task_id,)
            ).fetchone()
            if row is None:
                msg = f"run store {self._path}: no expectation on task {task_id!r}"
                raise StoreError(msg)
            exp = _expectation(row)
        self._audit.append("expectation.nudged", task_id=task_id)
        return exp

    def list_expectations(self) -> list[Expectation]:
        """Return every open expectation, earliest deadline first."""
        with self._reading() as c:
            rows = c.execute("SELECT * FROM expectations ORDER BY deadline, task_id").fetchall()
        return [_expectation(r) for r in rows]

    # --- turns ----------------------------------------------------------------------------

    def start_turn(
        self,
        agent: str,
        *,
        nonce: str,
        task_id: str | None,
        message_id: int | None,
        start_line: int,
    ) -> Turn:
        """Record the prompt now outstanding at ``agent``, replacing any previous one.

        Parameters
        ----------
        agent
            The agent prompted.
        nonce
            The prompt's nonce; replies must carry it.
        task_id
            The task the prompt belongs to, if any.
        message_id
            The message delivered in the prompt, if any.
        start_line
            Pane history line at which the agent's answer begins.
        """
        now = self._clock()
        with self._writing() as c:
            prev = c.execute("SELECT nonce FROM turns WHERE agent = ?", (agent,)).fetchone()
            row = c.execute(
                "INSERT OR REPLACE INTO turns (agent, nonce, task_id, message_id, start_line,"
                " started) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                (agent, nonce, task_id, message_id, start_line, now),
            ).fetchone()
            turn = _turn(row)
        self._audit.append(
            "turn.start",
            agent=agent,
            nonce=nonce,
            task_id=task_id,
            message_id=message_id,
            start_line=start_line,
            replaced=None if prev is None else prev[0],
        )
        return turn

    def current_turn(self, agent: str) -> Turn | None:
        """Return the prompt outstanding at ``agent``, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM turns WHERE agent = ?", (agent,)).fetchone()
        return None if row is None else _turn(row)

    def list_turns(self) -> list[Turn]:
        """Return every open turn (one query, whatever the number of agents)."""
        with self._reading() as c:
            rows = c.execute("SELECT * FROM turns ORDER BY agent").fetchall()
        return [_turn(r) for r in rows]

    def end_turn(self, agent: str, nonce: str) -> bool:
        """End ``agent``'s turn if it is still the one with ``nonce``.

        Returns
        -------
        bool
            False when no turn with that nonce was outstanding (already ended, or replaced by
            a newer prompt, which is left alone).
        """
        with self._writing() as c:
            n = c.execute(
                "DELETE FROM turns WHERE agent = ? AND nonce = ?", (agent, nonce)
            ).rowcount
        if n:
            self._audit.append("turn.end", agent=agent, nonce=nonce)
        return bool(n)

    # --- messages -------------------------------------------------------------------------

    def add_message(
        self,
        *,
        task_id: str | None,
        sender: str,
        recipient: str,
        type: str,
        msg_id: str,
        body: str,
        header: t.Mapping[str, t.Any],
        nonce: str | None = None,
        dedupe_key: str,
        state: MessageState = MessageState.QUEUED,
        text: str | None = None,
        ttl: float | None = None,
    ) -> Message | None:
        """Add a message unless one with ``dedupe_key`` exists.

        Re-parsing the same block after a crash or a screen redraw yields the same
        ``dedupe_key``, so it adds nothing the second time.

        Parameters
        ----------
        task_id
            The task it belongs to (must exist), or None.
        sender, recipient
            Agent names.
        type, msg_id, nonce, header, body
            From the tagged block it was parsed from.
        dedupe_key
            Unique identity of the message.
        state
            Initial state, normally QUEUED (PARSED when it still needs vetting).
        text
            The exact prompt text, if already rendered.
        ttl
            Seconds from now after which an undelivered message expires.

        Returns
        -------
        Message or None
            The new row, or None when ``dedupe_key`` was taken (nothing is written).
        """
        now = self._clock()
        deadline = None if ttl is None else now + ttl
        state = MessageState(state)
        with self._writing() as c:
            try:
                row = c.execute(
                    "INSERT INTO messages (task_id, sender, recipient, type, msg_id, nonce,"
                    " body, header, text, state, created, updated, deadline, dedupe_key)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (dedupe_key) DO NOTHING RETURNING *",
                    (
                        task_id,
                        sender,
                        recipient,
                        type,
                        msg_id,
                        nonce,
                        body,
                        _json(header),
                        text,
                        state.value,
                        now,
                        now,
                        deadline,
                        dedupe_key,
                    ),
                ).fetchone()
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: cannot add message: {e}"
                raise StoreError(msg) from e
            if row is None:
                return None
            message = _message(row)
        self._audit.append(
            "message.add",
            id=message.id,
            task_id=task_id,
            sender=sender,
            recipient=recipient,
            type=type,
            msg_id=msg_id,
            nonce=nonce,
            dedupe_key=dedupe_key,
            state=state.value,
            deadline=deadline,
            header=message.header,
            body=body,
        )
        return message

    def transition(
        self,
        message_id: int,
        new_state: MessageState,
        *,
        expect: MessageState | t.Collection[MessageState] | None = None,
        error: str | None = None,
        evidence: str | None = None,
        turn_nonce: str | None = None,
        text: str | None = None,
    ) -> Message:
        """Move a message to ``new_state`` atomically (compare-and-set).

        Parameters
        ----------
        message_id
            The message's row id.
        new_state
            The target state; see :data:`~politerm.store.models.MESSAGE_TRANSITIONS`.
        expect
            The state(s) the caller believes the message is in; anything else raises, so two
            racing routers cannot both act on one message.
        error
            Stored as ``last_error``.
        evidence
            What showed the new state (e.g. the screen line that proved delivery).
        turn_nonce
            Nonce of the prompt carrying the message; set when delivery starts.
        text
            The exact prompt text, once rendered.

        Returns
        -------
        Message
            The row after the change. Entering DELIVERING increments ``attempts``.

        Raises
        ------
        StoreError
            No such message, its state is not one of ``expect``, or the transition is not
            allowed.
        """
        new_state = MessageState(new_state)
        expected = None if expect is None else _states(expect)
        with self._writing() as c:
            row = c.execute("SELECT state FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                msg = f"run store {self._path}: no message {message_id}"
                raise StoreError(msg)
            old = MessageState(row[0])
            if expected is not None and old not in expected:
                want = "|".join(sorted(s.value for s in expected))
                msg = f"message {message_id} is {old.value}, expected {want}"
                raise StoreError(msg)
            if not can_transition(old, new_state):
                msg = f"message {message_id}: illegal transition {old.value} -> {new_state.value}"
                raise StoreError(msg)
            changes: dict[str, t.Any] = {"state": new_state.value, "updated": self._clock()}
            if error is not None:
                changes["last_error"] = error
            if evidence is not None:
                changes["evidence"] = evidence
            if turn_nonce is not None:
                changes["turn_nonce"] = turn_nonce
            if text is not None:
                changes["text"] = text
            assignments = ", ".join(f"{k} = ?" for k in changes)  # keys are our own names
            if new_state is MessageState.DELIVERING:
                assignments += ", attempts = attempts + 1"
            row = c.execute(
                f"UPDATE messages SET {assignments} WHERE id = ? RETURNING *",
                [*changes.values(), message_id],
            ).fetchone()
            message = _message(row)
        self._audit.append(
            "message.transition",
            id=message_id,
            old=old.value,
            new=new_state.value,
            attempts=message.attempts,
            error=error,
            evidence=evidence,
            turn_nonce=turn_nonce,
            text=text,
        )
        return message

    def next_queued(self, recipient: str) -> Message | None:
        """Return the oldest QUEUED or RETRIED message for ``recipient`` not past its TTL."""
        with self._reading() as c:
            row = c.execute(
                "SELECT * FROM messages WHERE recipient = ? AND state IN (?, ?)"
                " AND (deadline IS NULL OR deadline > ?) ORDER BY id LIMIT 1",
                (recipient, *(s.value for s in sorted(SENDABLE_STATES)), self._clock()),
            ).fetchone()
        return None if row is None else _message(row)

    def in_flight(self) -> list[Message]:
        """Return every message whose delivery started but is not settled (DELIVERING)."""
        return self.list_messages(state=MessageState.DELIVERING)

    def list_messages(
        self,
        *,
        task_id: str | None = None,
        state: MessageState | t.Collection[MessageState] | None = None,
        recipient: str | None = None,
    ) -> list[Message]:
        """Return messages matching every filter given, oldest first."""
        where: list[str] = []
        args: list[t.Any] = []
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        if recipient is not None:
            where.append("recipient = ?")
            args.append(recipient)
        if state is not None:
            states = sorted(s.value for s in _states(state))
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args.extend(states)
        sql = "SELECT * FROM messages"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._reading() as c:
            rows = c.execute(sql + " ORDER BY id", args).fetchall()
        return [_message(r) for r in rows]

    def get_message(self, message_id: int) -> Message | None:
        """Return the message with row id ``message_id``, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else _message(row)

    def find_message(self, dedupe_key: str) -> Message | None:
        """Return the message with ``dedupe_key``, or None."""
        with self._reading() as c:
            row = c.execute("SELECT * FROM messages WHERE dedupe_key = ?", (dedupe_key,)).fetchone()
        return None if row is None else _message(row)

    def expire_messages(self, now: float) -> list[Message]:
        """Mark QUEUED/RETRIED messages whose deadline has passed as DEAD ("ttl expired").

        Parameters
        ----------
        now
            Epoch seconds; messages with ``deadline <= now`` expire.

        Returns
        -------
        list of Message
            The messages expired by this call, after the change.
        """
        sendable = sorted(s.value for s in SENDABLE_STATES)
        with self._writing() as c:
            rows = c.execute(
                "UPDATE messages SET state = ?, last_error = 'ttl expired', updated = ?"
                " WHERE state IN (?, ?) AND deadline IS NOT NULL AND deadline <= ?"
                " RETURNING *",
                (MessageState.DEAD.value, self._clock(), *sendable, now),
            ).fetchall()
            expired = sorted((_message(r) for r in rows), key=lambda m: m.id)
        if expired:
            self._audit.append("message.expire", ids=[m.id for m in expired], now=now)
        return expired

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
        with self._writing() as c:
            n = c.execute(
                "INSERT INTO blocks (agent, task_id, type, msg_id, nonce, dedupe_key, header,"
                " body, accepted, reason, seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (dedupe_key, accepted) DO NOTHING",
                (
                    agent,
                    task_id,
                    type,
                    msg_id,
                    nonce,
                    dedupe_key,
                    _json(header),
                    body,
                    int(accepted),
                    reason,
                    self._clock(),
                ),
            ).rowcount
        if n:
            self._audit.append(
                "block.record",
                agent=agent,
                task_id=task_id,
                type=type,
                msg_id=msg_id,
                nonce=nonce,
                dedupe_key=dedupe_key,
                accepted=accepted,
                reason=reason,
            )
        return bool(n)

    def list_blocks(self, task_id: str | None = None) -> list[Block]:
        """Return recorded blocks in the order seen, optionally for one task."""
        sql, args = "SELECT * FROM blocks", []
        if task_id is not None:
            sql, args = sql + " WHERE task_id = ?", [task_id]
        with self._reading() as c:
            rows = c.execute(sql + " ORDER BY id", args).fetchall()
        return [_block(r) for r in rows]

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
        with self._writing() as c:
            row = c.execute(
                "INSERT INTO events (ts, kind, task_id, agent, detail, data)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                (self._clock(), kind, task_id, agent, detail, _json(data)),
            ).fetchone()
            event = _event(row)
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
        where: list[str] = []
        args: list[t.Any] = []
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        if after is not None:
            where.append("id > ?")
            args.append(after)
        sql = "SELECT * FROM events" + (" WHERE " + " AND ".join(where) if where else "")
        with self._reading() as c:
            if after is not None:
                rows = c.execute(sql + " ORDER BY id LIMIT ?", [*args, limit]).fetchall()
                return [_event(r) for r in rows]
            rows = c.execute(sql + " ORDER BY id DESC LIMIT ?", [*args, limit]).fetchall()
        return [_event(r) for r in reversed(rows)]
