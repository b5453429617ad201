"""What the dashboard and the web monitor show, as plain JSON-able data.

One function reads the project's run store (agents, approvals, tasks, messages, events, epic
runs, work items, bridges), its pipeline runs and the private server's panes (every session's
agents; :mod:`politerm.ui.sessions` says which workflow each session belongs to),
so both views show the same thing and tests can assert on it without a screen. Everything is
redacted before it leaves this module.
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import typing as t

from politerm.agents.approval import PendingApproval, all_pending
from politerm.errors import PolitermError
from politerm.redact import Redactor
from politerm.status import collect, state_words
from politerm.store.epics import EpicStore
from politerm.ui.sessions import bridge_sessions, epic_sessions, tmux_sessions

if t.TYPE_CHECKING:
    from politerm.store import RunStore
    from politerm.ui.panes import PaneEntry

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: Event kinds a person has to act on, and the ones that end work; the views colour them.
ATTENTION = frozenset({"approval-asked", "question", "gate", "stuck", "limited", "agent-exited"})
FINISHED = frozenset({"done", "failed", "aborted"})


def printable(text: str) -> str:
    r"""``text`` with control characters shown as ``?``: agent text never drives a terminal.

    Examples
    --------
    >>> printable("ok\x1b[31m red\x07")
    'ok?[31m red?'
    >>> printable("tab\tand\nnewline")
    'tab\tand\nnewline'
    """
    return _CONTROL.sub("?", text)


def _clean(value: t.Any, redactor: Redactor) -> t.Any:
    if isinstance(value, str):
        return printable(redactor.redact(value))
    if isinstance(value, dict):
        return {k: _clean(v, redactor) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v, redactor) for v in value]
    return value


def _agents(status: dict[str, t.Any], panes: t.Sequence[PaneEntry]) -> list[dict[str, t.Any]]:
    by_pane = {p.pane_id: p for p in panes}
    rows: list[dict[str, t.Any]] = []
    seen: set[str] = set()
    for a in status["agents"]:
        pane = by_pane.get(a["pane"] or "")
        seen.add(a["pane"] or "")
        state = "exited" if pane is not None and pane.dead else a["state"]
        rows.append(
            {
                "name": a["name"],
                "state": state,
                # What the views print: a LIMITED agent's says when its limit resets.
                "state_words": state_words({**a, "state": state}),
                "limit": a.get("limit"),
                "pane": a["pane"],
                "session": pane.session if pane else None,
                "profile": a["profile"],
                "last_activity": pane.activity if pane else None,
                "tokens": a.get("tokens"),
                "turn": a["turn"],
                "live": pane is not None and not pane.dead,
            }
        )
    for p in panes:
        if p.pane_id in seen or not p.agent:
            continue
        rows.append(
            {
                "name": p.agent,
                "state": "exited" if p.dead else "running",
                "state_words": "exited" if p.dead else "running",
                "limit": None,
                "pane": p.pane_id,
                "session": p.session,
                "profile": p.command,
                "last_activity": p.activity,
                "tokens": None,
                "turn": None,
                "live": not p.dead,
            }
        )
    return rows


def _approval(p: PendingApproval) -> dict[str, t.Any]:
    return {
        "agent": p.agent,
        "tool": p.tool,
        "command": p.command,
        "question": p.question,
        "what": p.what,
        "asked": p.asked,
        "answer": p.answer.value if p.answer else None,
        "evidence": list(p.evidence),
    }


def _epics(store: RunStore) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    epics = EpicStore(store)
    runs = [
        {
            "id": r.id,
            "epic": r.epic,
            "state": r.state,
            "agent": r.agent,
            "started": r.started,
            "finished": r.finished,
        }
        for r in epics.list_runs()
    ]
    items = [
        {"id": i.id, "epic": i.epic, "title": i.title, "state": i.state, "priority": i.priority}
        for i in epics.list_items()
    ]
    return runs, items


def _mail(store: RunStore) -> list[dict[str, t.Any]]:
    from politerm.store.mail import Mailbox, MailState

    open_states = [s for s in MailState if not s.is_final]
    return [
        {
            "id": m.id, "kind": m.kind.value, "from": m.sender, "to": m.recipient,
            "state": m.state.value, "attempts": m.attempts, "reason": m.reason,
            "created": m.created,
        }
        for m in Mailbox(store).select(states=open_states, limit=200)
    ]  # fmt: skip


def _managers(store: RunStore) -> list[dict[str, t.Any]]:
    from politerm.manager.store import ManagerStore

    return [
        {
            "name": p.name, "state": p.state.value, "agent": p.agent, "goal": p.goal,
            "task": p.task_goal, "task_status": p.task_status, "step": p.step,
            "question": p.question, "error": p.error,
        }
        for p in ManagerStore(store).list_projects()
    ]  # fmt: skip


def _pipelines(project: pathlib.Path | None) -> list[dict[str, t.Any]]:
    if project is None:
        return []
    from politerm.pipeline.ops import project_status
    from politerm.pipeline.state import project_runs

    if not project_runs(project):
        return []
    with contextlib.suppress(PolitermError):
        return project_status(project)
    return []


def collect_overview(
    store: RunStore,
    panes: t.Sequence[PaneEntry] = (),
    *,
    project: pathlib.Path | None = None,
    loop_session: str | None = None,
    redactor: Redactor | None = None,
    events: int = 50,
) -> dict[str, t.Any]:
    """Everything the overview shows, redacted and free of control characters.

    Parameters
    ----------
    store
        The project's run store.
    panes
        The private server's panes (:func:`politerm.ui.panes.list_panes`).
    project
        The project directory, for its pipeline runs.
    loop_session
        The loop's tmux session (``[tmux] session``), told apart from the others by name.
    redactor
        Applied to every string; the built-in patterns when omitted.
    events
        How many recent events to include.
    """
    status = collect(store, events=events)
    # Every workflow keeps its questions under its own key (agent name, "<run>.step-<n>",
    # "epic.<session>"...): list them all, not only the loop's agents'.
    status["approvals"] = [_approval(p) for p in all_pending(store)]
    runs, items = _epics(store)
    pipelines = _pipelines(project)
    recorded = {r["session"] for r in pipelines if r.get("session")}
    sessions = tmux_sessions(panes, loop=loop_session, pipelines=recorded)
    data = {
        "project": str(project) if project else None,
        "sessions": sessions + epic_sessions(runs) + bridge_sessions(store),
        "agents": _agents(status, panes),
        "approvals": status["approvals"],
        "tasks": status["tasks"],
        "messages": status["messages"],
        "mail": _mail(store),
        "managers": _managers(store),
        "pipelines": pipelines,
        "epic_runs": runs,
        "work_items": items,
        "events": status["events"],
    }
    return t.cast("dict[str, t.Any]", _clean(data, redactor or Redactor()))
