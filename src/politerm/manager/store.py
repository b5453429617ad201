"""Manager mode in the run store: projects, their state machine, tasks and conversation turns.

Tables come from schema version 7 (see :mod:`politerm.store.db`). A project's state moves only
through :meth:`ManagerStore.transition`, which checks the move against
:data:`politerm.manager.states.TRANSITIONS` and writes the new state, the fields that go with
it and a ``manager.state`` event in one transaction: after a ``kill -9`` the store holds the
state before the move or after it, never half of it. Every text passes a
:class:`~politerm.redact.Redactor` before it is written.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import re
import secrets
import typing as t

from politerm.errors import ManagerProjectError
from politerm.manager.states import ManagerState, check_transition
from politerm.store._tables import StoreTables, insert, row_mapper

if t.TYPE_CHECKING:
    import sqlite3


SELECTED_META: t.Final = "manager.selected"
"""Meta key holding the selected project's name."""

STATE_EVENT: t.Final = "manager.state"
"""Event kind of every state transition."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TaskStatus(str, enum.Enum):
    """How a project's current (or last) task stands."""

    RUNNING = "running"
    PAUSED = "paused"
    COMPLETE = "complete"
    STOPPED = "stopped"
    FAILED = "failed"


class Role(str, enum.Enum):
    """Who said a turn of the conversation."""

    MANAGER = "manager"
    DEV = "dev"
    USER = "user"
    SYSTEM = "system"


class Channel(str, enum.Enum):
    """How instructions reach the dev agent."""

    PANE = "pane"
    FILE = "file"


@dataclasses.dataclass(frozen=True)
class Project:
    """One project the manager drives, with its state and counters."""

    name: str
    path: str
    goal: str
    channel: str
    agent: str
    state: ManagerState
    task_id: str | None
    task_goal: str | None
    task_status: str | None
    summary: str
    summaries: int
    turn_count: int
    step: int
    brain_calls: int
    overview_sent: bool
    last_instruction: str | None
    last_report: str | None
    question: str | None
    result: str | None
    error: str | None
    created: float
    updated: float

    @property
    def resumable(self) -> bool:
        """A task was under way (or waiting for the user) when the manager last stopped."""
        return self.task_id is not None and self.task_status in (
            TaskStatus.RUNNING.value,
            TaskStatus.PAUSED.value,
        )

    def to_json(self) -> dict[str, t.Any]:
        """A JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["state"] = self.state.value
        return out


@dataclasses.dataclass(frozen=True)
class Turn:
    """One turn of a task's conversation."""

    id: int
    project: str
    task_id: str
    step: int
    role: str
    text: str
    summarized: bool
    ts: float


def check_name(name: str) -> str:
    """Return ``name`` if it is a usable project name, else raise.

    Examples
    --------
    >>> check_name("shop-api")
    'shop-api'
    >>> check_name("a b")
    Traceback (most recent call last):
    ...
    politerm.errors.ManagerProjectError: project name 'a b': use letters, digits, '.', '_' or '-'
    """
    if not _NAME_RE.match(name):
        msg = f"project name {name!r}: use letters, digits, '.', '_' or '-'"
        raise ManagerProjectError(msg)
    return name


# What a move may write: every column but the key and the row's own bookkeeping.
_KEYS: t.Final = ("name", "path", "created", "updated")
_FIELDS: t.Final = frozenset(f.name for f in dataclasses.fields(Project)).difference(_KEYS)


_project = row_mapper(Project, state=ManagerState, overview_sent=bool)
_turn = row_mapper(Turn, summarized=bool)


class ManagerStore(StoreTables):
    """Manager tables of a :class:`~politerm.store.RunStore` (same connection, lock, audit).

    Parameters
    ----------
    store
        An open run store at schema version 7 or later.
    redactor
        Applied to every text before it is written.
    """

    # --- projects -------------------------------------------------------------------------

    def add_project(
        self,
        name: str,
        path: pathlib.Path,
        *,
        goal: str = "",
        channel: str = "pane",
        agent: str = "",
    ) -> Project:
        """Register a project (state IDLE).

        Raises
        ------
        ManagerProjectError
            Bad name, a path that is not a directory, an unknown channel, or a duplicate.
        """
        check_name(name)
        path = pathlib.Path(path).expanduser().absolute()
        if not path.is_dir():
            msg = f"project {name!r}: {path} is not a directory"
            raise ManagerProjectError(msg)
        try:
            Channel(channel)
        except ValueError:
            msg = f"project {name!r}: channel must be 'pane' or 'file', got {channel!r}"
            raise ManagerProjectError(msg) from None
        goal = self._kept(goal)
        now = self._now()
        values: dict[str, t.Any] = {"name": name, "path": str(path), "goal": goal}
        values |= {"channel": channel, "agent": agent, "state": ManagerState.IDLE.value}
        values |= {"created": now, "updated": now}
        with self.store._writing() as c:
            if insert(c, "manager_projects", values, "ON CONFLICT (name) DO NOTHING") is None:
                msg = f"project {name!r} already exists"
                raise ManagerProjectError(msg)
        self._audit("manager.project.add", project=name, path=str(path), goal=goal)
        self.store.add_event(
            "manager.project", agent="manager", detail=f"project {name} added ({path})",
            data={"project": name},
        )  # fmt: skip
        return self.project(name)

    def get_project(self, name: str) -> Project | None:
        """The project called ``name``, if any."""
        return self.store._one(_project, "SELECT * FROM manager_projects WHERE name = ?", name)

    def project(self, name: str) -> Project:
        """The project called ``name``.

        Raises
        ------
        ManagerProjectError
            No such project (the message lists the known ones).
        """
        found = self.get_project(name)
        if found is None:
            known = ", ".join(p.name for p in self.list_projects()) or "none"
            msg = f"no manager project {name!r}; known: {known}"
            raise ManagerProjectError(msg)
        return found

    def list_projects(self) -> list[Project]:
        """Every project, by name."""
        return self.store._all(_project, "SELECT * FROM manager_projects ORDER BY name")

    def select(self, name: str) -> None:
        """Remember ``name`` as the selected project."""
        self.project(name)
        self.store.set_meta(SELECTED_META, name)

    def selected(self) -> Project | None:
        """The selected project, if one is selected and still exists."""
        name = self.store.get_meta(SELECTED_META)
        return self.get_project(name) if name else None

    # --- state ----------------------------------------------------------------------------

    def _set(self, c: sqlite3.Connection, name: str, fields: t.Mapping[str, t.Any]) -> None:
        unknown = set(fields) - _FIELDS
        if unknown:
            msg = f"unknown project fields: {', '.join(sorted(unknown))}"
            raise ManagerProjectError(msg)
        values = {k: (self._kept(v) if isinstance(v, str) else v) for k, v in fields.items()}
        values = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in values.items()}
        values["updated"] = self._now()
        sets = ", ".join(f"{k} = ?" for k in values)
        c.execute(f"UPDATE manager_projects SET {sets} WHERE name = ?", (*values.values(), name))

    def update(self, name: str, **fields: t.Any) -> Project:
        """Change fields of a project without moving its state (redacted)."""
        with self.store._writing() as c:
            self._set(c, name, fields)
        return self.project(name)

    def transition(
        self, name: str, target: ManagerState, *, detail: str = "", **fields: t.Any
    ) -> Project:
        """Move the project to ``target`` with ``fields``, and record the move as an event.

        One transaction: the state check, the new state and fields, and the event.

        Raises
        ------
        ManagerStateError
            The state machine does not allow the move.
        ManagerProjectError
            No such project.
        """
        detail = self.redactor.redact(detail)
        with self.store.batch():
            current = self.project(name)
            check_transition(current.state, target)
            with self.store._writing() as c:
                self._set(c, name, {"state": target, **fields})
            line = f"{name}: {current.state.value} → {target.value}"
            self.store.add_event(
                STATE_EVENT,
                task_id=fields.get("task_id", current.task_id),
                agent="manager",
                detail=line + (f": {detail}" if detail else ""),
                data={"project": name, "from": current.state.value, "to": target.value},
            )
        return self.project(name)

    def start_task(self, name: str, goal: str) -> Project:
        """Begin a new task toward ``goal``: fresh task id and counters, state CALLING_BRAIN."""
        task_id = f"mgr-{secrets.token_hex(4)}"
        return self.transition(
            name,
            ManagerState.CALLING_BRAIN,
            detail=f"task {task_id}: {goal}",
            task_id=task_id,
            task_goal=goal,
            task_status=TaskStatus.RUNNING,
            turn_count=0,
            step=0,
            brain_calls=0,
            overview_sent=False,
            last_instruction=None,
            last_report=None,
            question=None,
            result=None,
            error=None,
        )

    # --- turns ----------------------------------------------------------------------------

    def add_turn(self, name: str, role: Role, text: str) -> Turn:
        """Append a turn to the project's current task (and bump its turn count)."""
        text = self._kept(text)
        with self.store._writing() as c:
            p = c.execute(
                "SELECT task_id, step FROM manager_projects WHERE name = ?", (name,)
            ).fetchone()
            if p is None or p["task_id"] is None:
                msg = f"project {name!r} has no task to add a turn to"
                raise ManagerProjectError(msg)
            values = {"project": name, "task_id": p["task_id"], "step": p["step"]}
            values |= {"role": role.value, "text": text, "ts": self._now()}
            turn = _turn(insert(c, "manager_turns", values))
            c.execute(
                "UPDATE manager_projects SET turn_count = turn_count + 1 WHERE name = ?", (name,)
            )
        self._audit("manager.turn", project=name, task=turn.task_id, role=role.value, text=text)
        return turn

    def turns(self, name: str, *, live: bool = False) -> list[Turn]:
        """Turns of the project's current task, oldest first.

        ``live`` keeps only the turns not yet folded into the context summary.
        """
        task_id = self.project(name).task_id
        sql = "SELECT * FROM manager_turns WHERE project = ? AND task_id = ?"
        if live:
            sql += " AND summarized = 0"
        return self.store._all(_turn, sql + " ORDER BY id", name, task_id)

    def fold_summary(self, name: str, summary: str, turn_ids: t.Sequence[int]) -> Project:
        """Replace the context summary and mark ``turn_ids`` as summarized, in one transaction."""
        summary = self._kept(summary)
        with self.store._writing() as c:
            c.executemany(
                "UPDATE manager_turns SET summarized = 1 WHERE project = ? AND id = ?",
                [(name, i) for i in turn_ids],
            )
            c.execute(
                "UPDATE manager_projects SET summary = ?, summaries = summaries + 1, updated = ?"
                " WHERE name = ?",
                (summary, self._now(), name),
            )
        self._audit("manager.summary", project=name, turns=list(turn_ids), summary=summary)
        return self.project(name)
