"""SQLite connection, pragmas and forward migrations of the run store.

The schema version lives in ``PRAGMA user_version`` and equals the number of
:data:`MIGRATIONS` applied. Each migration runs in its own ``BEGIN IMMEDIATE`` transaction
together with the version bump, so a crash leaves the store at the old or the new version,
never in between.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import time
import typing as t

import platformdirs

from politerm._internal.private import private_dir
from politerm.errors import SchemaTooNew, StoreError

BUSY_TIMEOUT_MS: t.Final = 10_000
"""How long a writer waits for another process's write transaction before giving up."""

FILE_MODE: t.Final = 0o600
DIR_MODE: t.Final = 0o700


class Migration(t.NamedTuple):
    """One forward step of the schema: ``statements`` take the store to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1_INITIAL = Migration(
    1,
    "initial schema",
    (
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE agents (
            name           TEXT PRIMARY KEY,
            session        TEXT NOT NULL,
            pane_id        TEXT NOT NULL,
            command        TEXT NOT NULL,
            cwd            TEXT NOT NULL,
            profile        TEXT NOT NULL,
            resume_command TEXT,
            env            TEXT NOT NULL DEFAULT '{}',
            state          TEXT NOT NULL,
            created        REAL NOT NULL,
            updated        REAL NOT NULL
        )
        """,
        """
        CREATE TABLE tasks (
            id         TEXT PRIMARY KEY,
            request    TEXT NOT NULL,
            state      TEXT NOT NULL,
            round      INTEGER NOT NULL DEFAULT 0,
            max_rounds INTEGER NOT NULL,
            report     TEXT,
            error      TEXT,
            question   TEXT,
            created    REAL NOT NULL,
            updated    REAL NOT NULL
        )
        """,
        """
        CREATE TABLE expectations (
            task_id  TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
            sender   TEXT NOT NULL,
            type     TEXT NOT NULL,
            deadline REAL NOT NULL,
            nudged   INTEGER NOT NULL DEFAULT 0,
            created  REAL NOT NULL
        )
        """,
        """
        CREATE TABLE messages (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id    TEXT REFERENCES tasks(id),
            sender     TEXT NOT NULL,
            recipient  TEXT NOT NULL,
            type       TEXT NOT NULL,
            msg_id     TEXT NOT NULL,
            nonce      TEXT,
            turn_nonce TEXT,
            body       TEXT NOT NULL,
            header     TEXT NOT NULL DEFAULT '{}',
            text       TEXT,
            state      TEXT NOT NULL,
            attempts   INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            evidence   TEXT,
            created    REAL NOT NULL,
            updated    REAL NOT NULL,
            deadline   REAL,
            dedupe_key TEXT NOT NULL UNIQUE
        )
        """,
        "CREATE INDEX messages_task ON messages(task_id)",
        """
        CREATE TABLE turns (
            agent      TEXT PRIMARY KEY,
            nonce      TEXT NOT NULL,
            task_id    TEXT REFERENCES tasks(id),
            message_id INTEGER REFERENCES messages(id),
            start_line INTEGER NOT NULL,
            started    REAL NOT NULL
        )
        """,
        # No foreign key to tasks: a block naming an unknown task is exactly the kind of thing
        # this log must be able to record (as rejected).
        """
        CREATE TABLE blocks (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            agent      TEXT NOT NULL,
            task_id    TEXT,
            type       TEXT NOT NULL,
            msg_id     TEXT,
            nonce      TEXT,
            dedupe_key TEXT NOT NULL,
            header     TEXT NOT NULL DEFAULT '{}',
            body       TEXT NOT NULL,
            accepted   INTEGER NOT NULL,
            reason     TEXT,
            seen       REAL NOT NULL,
            UNIQUE (dedupe_key, accepted)
        )
        """,
        "CREATE INDEX blocks_task ON blocks(task_id)",
    ),
)

_V2_EVENTS = Migration(
    2,
    "events timeline; index for next_queued",
    (
        """
        CREATE TABLE events (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            ts      REAL NOT NULL,
            kind    TEXT NOT NULL,
            task_id TEXT,
            agent   TEXT,
            detail  TEXT NOT NULL DEFAULT '',
            data    TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX events_task ON events(task_id, id)",
        # next_queued() runs on every router tick: recipient + state, oldest id first.
        "CREATE INDEX messages_recipient_state ON messages(recipient, state, id)",
    ),
)

_V3_EPICS = Migration(
    3,
    "epic runs: built-in work queue, runs, session records and summaries",
    (
        """
        CREATE TABLE epics (
            name    TEXT PRIMARY KEY,
            title   TEXT NOT NULL DEFAULT '',
            prompt  TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL
        )
        """,
        """
        CREATE TABLE work_items (
            id       TEXT PRIMARY KEY,
            epic     TEXT NOT NULL REFERENCES epics(name),
            title    TEXT NOT NULL,
            body     TEXT NOT NULL DEFAULT '',
            priority INTEGER NOT NULL DEFAULT 2,
            state    TEXT NOT NULL,
            note     TEXT,
            created  REAL NOT NULL,
            updated  REAL NOT NULL
        )
        """,
        "CREATE INDEX work_items_ready ON work_items(epic, state, priority, created)",
        """
        CREATE TABLE work_deps (
            item_id    TEXT NOT NULL REFERENCES work_items(id) ON DELETE CASCADE,
            depends_on TEXT NOT NULL REFERENCES work_items(id),
            PRIMARY KEY (item_id, depends_on)
        )
        """,
        """
        CREATE TABLE epic_runs (
            id          TEXT PRIMARY KEY,
            epic        TEXT NOT NULL,
            repo_root   TEXT NOT NULL,
            source      TEXT NOT NULL,
            agent       TEXT NOT NULL,
            state       TEXT NOT NULL,
            started     REAL NOT NULL,
            finished    REAL,
            config_hash TEXT NOT NULL DEFAULT ''
        )
        """,
        # No foreign keys: imported records may name runs and items this store never saw.
        """
        CREATE TABLE session_records (
            id              TEXT PRIMARY KEY,
            record_schema   INTEGER NOT NULL,
            kind            TEXT NOT NULL,
            run_id          TEXT,
            repo_root       TEXT NOT NULL DEFAULT '',
            epic            TEXT NOT NULL,
            item_id         TEXT,
            agent_binary    TEXT NOT NULL DEFAULT '',
            agent_version   TEXT,
            model           TEXT,
            flags           TEXT NOT NULL DEFAULT '[]',
            status          TEXT NOT NULL,
            commit_summary  TEXT,
            commit_body     TEXT,
            queued          REAL NOT NULL,
            started         REAL,
            finished        REAL,
            transcript_path TEXT,
            config_hash     TEXT NOT NULL DEFAULT '',
            redaction       TEXT NOT NULL DEFAULT 'clean',
            escalation      TEXT,
            error           TEXT,
            drift           TEXT NOT NULL DEFAULT '[]'
        )
        """,
        "CREATE INDEX session_records_run ON session_records(run_id, queued)",
        "CREATE INDEX session_records_epic ON session_records(epic, kind, finished)",
    ),
)

_V4_MAIL = Migration(
    4,
    "messaging: requests and responses between agents, with acks and dead letters",
    (
        """
        CREATE TABLE mail (
            id             TEXT PRIMARY KEY,
            kind           TEXT NOT NULL,
            session        TEXT NOT NULL,
            sender         TEXT NOT NULL,
            sender_pane    TEXT,
            recipient      TEXT NOT NULL,
            recipient_pane TEXT NOT NULL,
            capability     TEXT NOT NULL,
            reply_to       TEXT,
            body_path      TEXT NOT NULL,
            size           INTEGER NOT NULL,
            sha256         TEXT NOT NULL,
            response_path  TEXT,
            state          TEXT NOT NULL,
            reason         TEXT,
            attempts       INTEGER NOT NULL DEFAULT 0,
            max_attempts   INTEGER NOT NULL,
            created        REAL NOT NULL,
            updated        REAL NOT NULL,
            expires        REAL NOT NULL,
            delivered      REAL,
            started        REAL,
            responded      REAL
        )
        """,
        # the postman's question on every wake-up: what is queued for whom, oldest first
        "CREATE INDEX mail_recipient_state ON mail(recipient, state, created)",
        "CREATE INDEX mail_state ON mail(state, updated)",
    ),
)

_V5_BRIDGE = Migration(
    5,
    "task bridge: the step journal of each handed-over task",
    (
        # One row per step (file edits, a command, an agent turn) of a task taken from a
        # bridge queue; written before the step acts, settled from evidence after a crash.
        """
        CREATE TABLE bridge_steps (
            queue    TEXT NOT NULL,
            task_id  TEXT NOT NULL,
            step     INTEGER NOT NULL,
            kind     TEXT NOT NULL,
            state    TEXT NOT NULL,
            evidence TEXT NOT NULL DEFAULT '{}',
            result   TEXT NOT NULL DEFAULT '{}',
            started  REAL NOT NULL,
            finished REAL,
            PRIMARY KEY (queue, task_id, step)
        )
        """,
    ),
)

_V6_TURN_STATES = Migration(
    6,
    "turn states (politerm.store.turns): delivering, waiting, holding",
    (
        # A turn from an older store was written before its delivery: settle it as one.
        "ALTER TABLE turns ADD COLUMN state TEXT NOT NULL DEFAULT 'delivering'",
        """
        UPDATE turns SET state = 'waiting' WHERE message_id IS NULL OR message_id IN
            (SELECT id FROM messages WHERE state IN ('delivered', 'acknowledged'))
        """,
    ),
)

_V7_MANAGER = Migration(
    7,
    "manager mode: projects (state, task, summary, counters) and conversation turns",
    (
        """
        CREATE TABLE manager_projects (
            name             TEXT PRIMARY KEY,
            path             TEXT NOT NULL,
            goal             TEXT NOT NULL DEFAULT '',
            channel          TEXT NOT NULL DEFAULT 'pane',
            agent            TEXT NOT NULL DEFAULT '',
            state            TEXT NOT NULL,
            task_id          TEXT,
            task_goal        TEXT,
            task_status      TEXT,
            summary          TEXT NOT NULL DEFAULT '',
            summaries        INTEGER NOT NULL DEFAULT 0,
            turn_count       INTEGER NOT NULL DEFAULT 0,
            step             INTEGER NOT NULL DEFAULT 0,
            brain_calls      INTEGER NOT NULL DEFAULT 0,
            overview_sent    INTEGER NOT NULL DEFAULT 0,
            last_instruction TEXT,
            last_report      TEXT,
            question         TEXT,
            result           TEXT,
            error            TEXT,
            created          REAL NOT NULL,
            updated          REAL NOT NULL
        )
        """,
        """
        CREATE TABLE manager_turns (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            project    TEXT NOT NULL REFERENCES manager_projects(name) ON DELETE CASCADE,
            task_id    TEXT NOT NULL,
            step       INTEGER NOT NULL,
            role       TEXT NOT NULL,
            text       TEXT NOT NULL,
            summarized INTEGER NOT NULL DEFAULT 0,
            ts         REAL NOT NULL
        )
        """,
        "CREATE INDEX manager_turns_task ON manager_turns(project, task_id, summarized, id)",
    ),
)

_V8_JOURNAL = Migration(
    8,
    "the journal of turns (politerm.store.journal); each workflow record's turn_id",
    (
        # One row per prompt handed to an agent, written by the driver before it types.
        """
        CREATE TABLE turn_journal (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,
            agent        TEXT NOT NULL,
            workflow     TEXT NOT NULL,
            record       TEXT NOT NULL,
            record_key   TEXT NOT NULL,
            attempt      INTEGER NOT NULL,
            nonce        TEXT,
            state        TEXT NOT NULL,
            digest       TEXT NOT NULL,
            length       INTEGER NOT NULL,
            head         TEXT NOT NULL,
            proof        TEXT NOT NULL DEFAULT '{}',
            conversation TEXT,
            start_line   INTEGER,
            started      REAL NOT NULL,
            delivered    REAL,
            ended        REAL,
            outcome      TEXT
        )
        """,
        "CREATE INDEX turn_journal_record ON turn_journal(record, record_key, attempt)",
        # The recovery's and poli status's question: what is in flight (a few rows at most).
        """
        CREATE INDEX turn_journal_open ON turn_journal(agent, nonce)
            WHERE state IN ('handed', 'delivered')
        """,
        "ALTER TABLE messages ADD COLUMN turn_id INTEGER",
        "ALTER TABLE mail ADD COLUMN turn_id INTEGER",
        "ALTER TABLE bridge_steps ADD COLUMN turn_id INTEGER",
        "ALTER TABLE manager_turns ADD COLUMN turn_id INTEGER",
        "ALTER TABLE session_records ADD COLUMN turn_id INTEGER",
    ),
)

_V9_LEASES = Migration(
    9,
    "the fleet's lease on a journal row (node, fencing epoch, expiry, work) and its verdict",
    (
        # A node writes the lease under which it types a fleet work's prompt before the
        # paste; the queue's verdict on the result (accepted, or rejected: fenced) after.
        "ALTER TABLE turn_journal ADD COLUMN work TEXT",
        "ALTER TABLE turn_journal ADD COLUMN node TEXT",
        "ALTER TABLE turn_journal ADD COLUMN epoch INTEGER",
        "ALTER TABLE turn_journal ADD COLUMN lease_until REAL",
        "ALTER TABLE turn_journal ADD COLUMN verdict TEXT",
    ),
)

_V10_MAIL_ORIGIN = Migration(
    10,
    "messaging across a fleet: the node a request came from, on its copy where it is typed",
    (
        # A request from another machine of the fleet is copied into the store of the node
        # that hosts its receiver (so `poli reply` there finds it); the copy names the node
        # of its sender, and the response goes back there through the fleet's queue.
        "ALTER TABLE mail ADD COLUMN origin TEXT",
    ),
)

_V11_SHARDS = Migration(
    11,
    "the tmux server each agent runs on (a session's agents spread over several servers)",
    # Empty: the configured server ([tmux] socket), as every agent ran before.
    ("ALTER TABLE agents ADD COLUMN socket TEXT NOT NULL DEFAULT ''",),
)

MIGRATIONS: t.Final[tuple[Migration, ...]] = (
    _V1_INITIAL,
    _V2_EVENTS,
    _V3_EPICS,
    _V4_MAIL,
    _V5_BRIDGE,
    _V6_TURN_STATES,
    _V7_MANAGER,
    _V8_JOURNAL,
    _V9_LEASES,
    _V10_MAIL_ORIGIN,
    _V11_SHARDS,
)
"""Every migration in order; ``MIGRATIONS[i].version == i + 1``. Only ever append."""

SCHEMA_VERSION: t.Final = len(MIGRATIONS)
"""The schema version this code writes."""


def default_store_path() -> pathlib.Path:
    """Where the run store lives unless told otherwise.

    Returns
    -------
    pathlib.Path
        ``<user state dir>/politerm/runs.sqlite3`` (e.g. ``~/.local/state/politerm/...``).
    """
    return platformdirs.user_state_path("politerm") / "runs.sqlite3"


def ensure_private_dir(directory: pathlib.Path) -> None:
    """Create ``directory`` and missing parents with mode 0700; leave existing ones alone.

    Parameters
    ----------
    directory
        The folder that will hold the store.
    """
    private_dir(directory)


def create_private_file(path: pathlib.Path) -> None:
    """Create ``path`` empty with mode 0600 unless it already exists.

    SQLite gives the ``-wal`` and ``-shm`` files the mode of the database file, so creating
    the database ourselves is what keeps all three private.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have removed bits we asked for; never added
    finally:
        os.close(fd)


def connect(
    path: pathlib.Path, *, migrations: t.Sequence[Migration] = MIGRATIONS
) -> sqlite3.Connection:
    """Open (creating if needed) the store at ``path`` and bring its schema up to date.

    Parameters
    ----------
    path
        The SQLite file.
    migrations
        The migrations to apply; tests pass a prefix of :data:`MIGRATIONS` to build an old
        store.

    Returns
    -------
    sqlite3.Connection
        In autocommit mode (``isolation_level=None``): callers open their own short
        ``BEGIN IMMEDIATE`` transactions. Rows are :class:`sqlite3.Row`.

    Raises
    ------
    SchemaTooNew
        The file's schema version is newer than ``len(migrations)``.
    StoreError
        The file is not a SQLite database, or cannot be opened or migrated.
    """
    ensure_private_dir(path.parent)
    try:
        create_private_file(path)
    except OSError as e:
        msg = f"cannot create run store {path}: {e.strerror or e}"
        raise StoreError(msg) from e
    return _open(path, lambda conn: migrate(conn, path, migrations))


def connect_existing(
    path: pathlib.Path, *, migrations: t.Sequence[Migration] = MIGRATIONS
) -> sqlite3.Connection:
    """Open the store at ``path`` as it is: no file created, no migration.

    What a view opens another project's store with: looking at a project must not change
    its store (that project's own ``poli`` migrates it when it next opens it).

    Raises
    ------
    SchemaTooNew
        The file was written by a newer politerm.
    StoreError
        No store there, not a run store, or one of an older schema than ``migrations``.
    """
    if not path.is_file():
        msg = f"no run store at {path}"
        raise StoreError(msg)
    # _configure's settings are the connection's own; a run store is in WAL mode already.
    return _open(path, lambda conn: _check_schema(conn, path, len(migrations)))


def _open(
    path: pathlib.Path, prepare: t.Callable[[sqlite3.Connection], object]
) -> sqlite3.Connection:
    """Connect to ``path``, configure the connection, then ``prepare`` it (closed if it fails)."""
    try:
        # check_same_thread=False: RunStore serialises use of the connection with a lock, and
        # the router may call it from worker threads.
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
    except sqlite3.Error as e:
        msg = f"cannot open run store {path}: {e}"
        raise StoreError(msg) from e
    try:
        conn.row_factory = sqlite3.Row
        _configure(conn, path)
        prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _check_schema(conn: sqlite3.Connection, path: pathlib.Path, ours: int) -> None:
    # A store read as it is must be of our schema exactly: older is migrated by its owner.
    current = _version_at_most(conn, path, ours)
    if current < ours:
        msg = (
            f"run store {path} is at schema version {current}, this politerm reads {ours}:"
            " its project's next poli command migrates it"
        )
        raise StoreError(msg)


def _configure(conn: sqlite3.Connection, path: pathlib.Path) -> None:
    try:
        # busy_timeout first: switching to WAL needs a lock another process may hold.
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = _switch_to_wal(conn)
        # FULL, not NORMAL: a committed routing decision must survive power loss, not only a
        # killed process; the write rate is a few per second at most.
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as e:
        msg = f"{path} is not a usable run store: {e}"
        raise StoreError(msg) from e
    if str(mode).lower() != "wal":
        msg = f"{path}: could not switch the run store to WAL mode (got {mode!r})"
        raise StoreError(msg)


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    # SQLite answers "database is locked" at once, without calling the busy handler, when
    # another process is switching the same fresh file to WAL; so wait here, bounded.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def user_version(conn: sqlite3.Connection) -> int:
    """Return the schema version recorded in the open database."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(
    conn: sqlite3.Connection, path: pathlib.Path, migrations: t.Sequence[Migration] = MIGRATIONS
) -> int:
    """Apply every migration the store lacks, one transaction each.

    Parameters
    ----------
    conn
        An autocommit connection (see :func:`connect`).
    path
        Named in error messages.
    migrations
        Ordered so that ``migrations[i].version == i + 1``.

    Returns
    -------
    int
        The schema version after migrating.

    Raises
    ------
    SchemaTooNew
        The store's version is beyond ``len(migrations)``.
    StoreError
        A migration failed; the store stays at the last version that completed.
    """
    ours = len(migrations)
    current = _version_at_most(conn, path, ours)
    for m in migrations[current:]:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read under the write lock: another process may have migrated meanwhile.
                if user_version(conn) >= m.version:
                    conn.execute("COMMIT")
                    continue
                for statement in m.statements:
                    conn.execute(statement)
                # PRAGMA takes no bound parameters; m.version is an int from our own table.
                conn.execute(f"PRAGMA user_version = {int(m.version)}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            msg = f"run store {path}: migration {m.version} ({m.description}) failed: {e}"
            raise StoreError(msg) from e
    final = user_version(conn)
    if final > ours:  # a newer politerm migrated the file while we were opening it
        msg = _too_new(path, final, ours)
        raise SchemaTooNew(msg)
    return final


def _version_at_most(conn: sqlite3.Connection, path: pathlib.Path, ours: int) -> int:
    """The store's schema version; :class:`SchemaTooNew` beyond ``ours``."""
    try:
        current = user_version(conn)
    except sqlite3.DatabaseError as e:
        msg = f"{path} is not a usable run store: {e}"
        raise StoreError(msg) from e
    if current > ours:
        raise SchemaTooNew(_too_new(path, current, ours))
    return current


def _too_new(path: pathlib.Path, theirs: int, ours: int) -> str:
    return (
        f"run store {path} has schema version {theirs}, newer than this politerm's "
        f"{ours}; upgrade politerm"
    )
