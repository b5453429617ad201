"""The run store's agents, tasks and expectations (what the router waits for)."""

from __future__ import annotations

import sqlite3
import typing as t

from politerm.errors import StoreError
from politerm.store._core import StoreCore
from politerm.store._rows import _agent, _expectation, _json, _task, _text
from politerm.store._tables import insert, update_set, where
from politerm.store.models import TERMINAL_TASK_STATES, Agent, Expectation, Task, TaskState

DEFAULT_AGENT_STATE: t.Final = "starting"
"""State of an agent the store has not been told anything else about."""

TaskField = t.Literal["report", "error", "question"]


class TaskRows(StoreCore):
    """The run store's agents, tasks and expectations (what the router waits for)."""

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
        socket: str = "",
    ) -> Agent:
        """Record where an agent runs, creating it or replacing its launch details.

        A new agent starts in state ``"starting"``; an existing one keeps its state.
        ``socket`` names the tmux server of its pane when the session spans several (empty:
        the configured one).

        Returns
        -------
        Agent
            The row as stored.
        """
        launch = {
            "session": session,
            "pane_id": pane_id,
            "command": command,
            "cwd": cwd,
            "profile": profile,
            "resume_command": resume_command,
            "env": _json(env),
            "socket": socket,
        }
        now = self._clock()
        row = {"name": name, **launch, "state": DEFAULT_AGENT_STATE, "created": now, "updated": now}
        with self._writing() as c:
            agent = _agent(insert(c, "agents", row, update_set("name", [*launch, "updated"])))
        self._audit.append("agent.upsert", name=name, **(launch | {"env": agent.env}))
        return agent

    def get_agent(self, name: str) -> Agent | None:
        """Return the agent called ``name``, or None."""
        return self._one(_agent, "SELECT * FROM agents WHERE name = ?", name)

    def list_agents(self) -> list[Agent]:
        """Return every agent, by name.

        A row unchanged since an earlier listing gives the same :class:`Agent` as then
        (built once: its ``env`` is decoded from JSON), so a view that lists 500 agents on
        every refresh builds only the ones that changed.
        """
        with self._reading() as c:
            rows = c.execute("SELECT * FROM agents ORDER BY name").fetchall()
        known = self._agent_rows
        if len(known) > 2 * len(rows) + 64:
            known.clear()  # rows replaced since: forget the old ones
        agents: list[Agent] = []
        for row in rows:
            key = tuple(row)
            agent = known.get(key)
            if agent is None:
                agent = known[key] = _agent(row)
                self.agents_built += 1
            agents.append(agent)
        return agents

    def set_agent_state(self, name: str, state: str) -> Agent:
        """Set an agent's state (an ``AgentState`` member or its value).

        Raises
        ------
        StoreError
            No agent is called ``name``.
        """
        value = _text(state)
        sql = "UPDATE agents SET state = ?, updated = ? WHERE name = ? RETURNING *"
        agent = self._change(_agent, f"agent named {name!r}", sql, value, self._clock(), name)
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
            values: dict[str, t.Any] = {"id": task_id, "request": request, "state": "pending"}
            values |= {"max_rounds": max_rounds, "created": now, "updated": now}
            try:
                row = insert(c, "tasks", values)
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: task {task_id!r} exists"
                raise StoreError(msg) from e
            task = _task(row)
        self._audit.append("task.create", task_id=task_id, request=request, max_rounds=max_rounds)
        return task

    def get_task(self, task_id: str) -> Task | None:
        """Return the task, or None."""
        return self._one(_task, "SELECT * FROM tasks WHERE id = ?", task_id)

    def list_tasks(self, active_only: bool = False) -> list[Task]:
        """Return tasks oldest first; with ``active_only``, those not DONE/FAILED/ABORTED."""
        active = sorted(set(TaskState) - TERMINAL_TASK_STATES) if active_only else None
        sql, args = where(state=active)
        return self._all(_task, f"SELECT * FROM tasks{sql} ORDER BY created, rowid", *args)

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
        given: dict[str, t.Any] = {
            "state": None if state is None else TaskState(state).value,
            "round": round,
        }
        given["report"] = report
        given |= {"error": error, "question": question}
        changes = {name: value for name, value in given.items() if value is not None}
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
        sql = f"UPDATE tasks SET {assignments} WHERE id = ? RETURNING *"
        task = self._change(_task, f"task {task_id!r}", sql, *changes.values(), task_id)
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
            wait = {"sender": sender, "type": type, "deadline": deadline, "nudged": nudged}
            values = {"task_id": task_id, **wait, "created": now}
            try:
                row = insert(c, "expectations", values, update_set("task_id", [*wait, "created"]))
            except sqlite3.IntegrityError as e:
                msg = f"run store {self._path}: no task {task_id!r}"
                raise StoreError(msg) from e
            exp = _expectation(row)
        self._audit.append("expectation.set", task_id=task_id, **wait)
        return exp

    def get_expectation(self, task_id: str) -> Expectation | None:
        """Return what the router waits for on ``task_id``, or None."""
        return self._one(_expectation, "SELECT * FROM expectations WHERE task_id = ?", task_id)

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
        sql = "UPDATE expectations SET nudged = 1 WHERE task_id = ? RETURNING *"
        exp = self._change(_expectation, f"expectation on task {task_id!r}", sql, task_id)
        self._audit.append("expectation.nudged", task_id=task_id)
        return exp

    def list_expectations(self) -> list[Expectation]:
        """Return every open expectation, earliest deadline first."""
        return self._all(_expectation, "SELECT * FROM expectations ORDER BY deadline, task_id")
