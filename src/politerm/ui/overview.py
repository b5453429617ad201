"""What the dashboard and the web monitor show, as plain JSON-able data.

One function reads the project's run store (agents, approvals, tasks, messages, events, epic
runs, work items, bridges), its pipeline runs and the private server's panes (every session's
agents; :mod:`politerm.ui.sessions` says which workflow each session belongs to),
so both views show the same thing and tests can assert on it without a screen. The other
projects a view shows (:mod:`politerm.ui.projects`) add their agents and what waits in them:
the inbox (:mod:`politerm.ui.inbox`) spans every project shown. Everything is redacted before
it leaves this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import re
import typing as t

from politerm.agents.approval import all_pending
from politerm.errors import PolitermError
from politerm.project import project_key
from politerm.redact import Redactor, map_strings
from politerm.status import (
    approval_row,
    asked_on_node_row,
    collect,
    remote_rows,
    remote_tasks,
    state_words,
)
from politerm.store.epics import EpicStore
from politerm.ui.inbox import (
    approval_panes,
    asked_on_node,
    merge,
    project_inbox,
    task_asked_on_node,
)
from politerm.ui.projects import ProjectRef, owner_of
from politerm.ui.sessions import bridge_sessions, epic_sessions, tmux_sessions

if t.TYPE_CHECKING:
    from politerm.driver.panes import PaneEntry
    from politerm.store import RunStore

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


class Cleaner:
    r"""Redacts and makes printable every string of an overview, remembering what it did.

    A view refreshes its overview on every store change, and at 500 agents the overview
    holds ~4,500 strings, nearly all the same as last time: redacting each again was most of
    a refresh. A string's clean form depends on the string alone (the patterns are fixed), so
    one cleaned before is looked up, and only new strings are redacted: the redaction work of
    a refresh grows with what changed, not with the number of agents.

    Parameters
    ----------
    redactor
        The patterns applied (the built-in ones when omitted).

    Examples
    --------
    >>> c = Cleaner()
    >>> c.clean({"a": ["password=hunter2", "ok\x1b"]})
    {'a': ['[REDACTED:password]', 'ok?']}
    >>> c.clean(["ok\x1b", "ok\x1b"]) and c.redactions
    2
    """

    MAX_REMEMBERED = 50_000
    """Strings remembered at most (then forgotten all at once and learned again)."""

    LONGEST_REMEMBERED = 4096
    """Longer strings (reports, details) are redacted each time, not remembered."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or Redactor()
        self.redactions = 0
        """How many strings were redacted (not found among those cleaned before)."""
        self._done: dict[str, str] = {}

    def clean(self, value: t.Any) -> t.Any:
        """``value`` (JSON-like) with each string redacted and free of control characters."""
        return map_strings(value, self._clean)

    def _clean(self, value: str) -> str:
        done = self._done.get(value)
        if done is None:
            self.redactions += 1
            done = printable(self.redactor.redact(value))
            if len(value) <= self.LONGEST_REMEMBERED:
                if len(self._done) >= self.MAX_REMEMBERED:
                    self._done.clear()
                self._done[value] = done
        return done


def _row(project: ProjectRef, name: str, state: str, **fields: t.Any) -> dict[str, t.Any]:
    """An agents-table row: ``fields`` over what a row shows of an agent known by name only."""
    return {
        "name": name, "state": state, "state_words": state, "limit": None, "pane": None,
        "session": None, "profile": None, "last_activity": None, "tokens": None, "turn": None,
        "live": False, "project": project.name, "project_key": project.key, "approval": None,
    } | fields  # fmt: skip


def _agents(
    status: dict[str, t.Any], panes: t.Sequence[PaneEntry], project: ProjectRef
) -> list[dict[str, t.Any]]:
    # A pane id is unique on its own server only (a session with many agents spans several):
    # the agent's own pane is the one of that id tagged with its name.
    by_pane = {p.pane_id: p for p in panes}
    by_agent = {(p.pane_id, p.agent): p for p in panes}
    rows: list[dict[str, t.Any]] = []
    seen: set[tuple[str, str]] = set()
    for a in status["agents"]:
        pane = by_agent.get((a["pane"] or "", a["name"])) or by_pane.get(a["pane"] or "")
        if pane is not None:
            seen.add((pane.socket, pane.pane_id))
        state = "exited" if pane is not None and pane.dead else a["state"]
        rows.append(
            _row(
                project, a["name"], state,
                # What the views print: a LIMITED agent's says when its limit resets.
                state_words=state_words({**a, "state": state}), limit=a.get("limit"),
                pane=a["pane"], session=pane.session if pane else None, profile=a["profile"],
                last_activity=pane.activity if pane else None, tokens=a.get("tokens"),
                turn=a["turn"], live=pane is not None and not pane.dead,
            )
        )  # fmt: skip
    for p in panes:
        if (p.socket, p.pane_id) in seen or not p.agent:
            continue
        rows.append(
            _row(
                project, p.agent, "exited" if p.dead else "running", pane=p.pane_id,
                session=p.session, profile=p.command, last_activity=p.activity, live=not p.dead,
            )
        )  # fmt: skip
    return rows


@dataclasses.dataclass(frozen=True)
class FleetRows:
    """The fleet's agents a view shows beside this machine's (the agents' board)."""

    node: str
    """This machine's node."""
    elsewhere: frozenset[str]
    """The agents this machine does not drive: shown from the board only."""
    rows: t.Sequence[t.Mapping[str, t.Any]]
    """The board's rows (:meth:`politerm.fleet.board.BoardRow.to_json`)."""
    asks: t.Sequence[t.Mapping[str, t.Any]] = ()
    """The questions the tasks of live routers wait on (``TaskAsk.to_json``)."""


def _fleet(
    agents: list[dict[str, t.Any]], fleet: FleetRows, home: ProjectRef
) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    """The agent rows with each one's node, and the inbox items of the remote questions."""
    local = [{**a, "node": fleet.node} for a in agents if a["name"] not in fleet.elsewhere]
    shown = remote_rows(fleet.rows, fleet.node, {a["name"] for a in local})
    rows, asks = [], []
    for r in shown:
        approval = r.get("approval")
        state = "waiting_approval" if approval else r["state"]
        rows.append(
            _row(
                home, r["agent"], state,
                state_words=state if not r["lost"] else f"node lost (last {r['last_state']})",
                profile=r["profile"], last_activity=r["since"], turn=r["turn"],
                live=not r["lost"], node=r["node"],
                approval=None if not approval else {
                    "what": approval.get("what", ""), "command": approval.get("command", "")
                },
            )
        )  # fmt: skip
        if approval:
            asks.append(asked_on_node(home, r["agent"], r["node"], approval))
    # This machine's router's tasks are in its own store, so in its inbox already.
    asks += [task_asked_on_node(home, a) for a in fleet.asks if a["node"] != fleet.node]
    return local + rows, asks


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

    # What the views show, not the whole record: a report, a summary or the last instruction
    # would be sent to every page and redacted again on each redraw for nothing.
    shown = ("name", "state", "agent", "goal", "task_goal", "task_status", "step", "question",
             "error")  # fmt: skip
    return [
        {k: v for k, v in p.to_json().items() if k in shown}
        for p in ManagerStore(store).list_projects()
    ]


def _pipelines(project: pathlib.Path | None) -> list[dict[str, t.Any]]:
    if project is None:
        return []
    from politerm.pipeline.state import project_runs

    if not project_runs(project):
        return []
    # Imported only when there are runs to show: it pulls the pipeline runner and the driver's
    # turn machinery, a tenth of ``poli dash``'s start for a project with no pipeline.
    from politerm.pipeline.ops import project_status

    with contextlib.suppress(PolitermError):
        return project_status(project)
    return []


def _owned(
    panes: t.Sequence[PaneEntry],
    home: ProjectRef,
    loop_session: str | None,
    others: t.Sequence[tuple[ProjectRef, list[dict[str, t.Any]]]],
    pipelines: list[dict[str, t.Any]],
) -> dict[str | None, list[PaneEntry]]:
    """The panes grouped by the key of the project that claims each (None: no project)."""
    refs = [home, *(ref for ref, _ in others)]
    sessions = {home.key: loop_session or f"poli-{home.key}"}
    sessions |= {ref.key: f"poli-{ref.key}" for ref, _ in others}
    runs = {str(r["session"]): home.key for r in pipelines if r.get("session")}
    for ref, theirs in others:
        runs |= {str(r["session"]): ref.key for r in theirs if r.get("session")}
    out: dict[str | None, list[PaneEntry]] = {}
    for p in panes:
        out.setdefault(owner_of(p, refs, sessions, runs), []).append(p)
    return out


def _mark_approvals(rows: list[dict[str, t.Any]], inbox: list[dict[str, t.Any]]) -> None:
    """Show each agent's open approval on its row, whatever workflow asked it.

    A pipeline step asks under ``<run>.step-<n>`` while its row is ``step-<n>``: the two meet
    at the pane (:func:`politerm.ui.inbox.approval_panes`).
    """
    asks = [i for i in inbox if i["kind"] == "approval"]
    for row in rows:
        for item in asks:
            same_pane = row["pane"] is not None and item["pane"] == row["pane"]
            if item["project_key"] != row["project_key"]:
                continue
            if same_pane or item["agent"].upper() == row["name"].upper():
                row["approval"] = {"what": item["what"], "command": item.get("command", "")}
                if row["state"] != "exited":
                    row["state"] = "waiting_approval"
                    row["state_words"] = state_words(row)
                break


def collect_overview(
    store: RunStore,
    panes: t.Sequence[PaneEntry] = (),
    *,
    project: pathlib.Path | None = None,
    loop_session: str | None = None,
    redactor: Redactor | None = None,
    events: int = 50,
    home: ProjectRef | None = None,
    others: t.Sequence[tuple[ProjectRef, RunStore]] = (),
    cleaner: Cleaner | None = None,
    fleet: FleetRows | None = None,
) -> dict[str, t.Any]:
    """Everything the overview shows, redacted and free of control characters.

    Parameters
    ----------
    store
        The view's own project's run store.
    panes
        The private server's panes (:meth:`politerm.driver.observer.Observer.panes`), all of
        them: each is shown with the project that claims it
        (:func:`politerm.ui.projects.owner_of`); one no project claims is shown with the
        view's own.
    project
        The project directory, for its pipeline runs.
    loop_session
        The loop's tmux session (``[tmux] session``), told apart from the others by name.
    redactor
        Applied to every string; the built-in patterns when omitted.
    events
        How many recent events to include.
    home
        The view's own project (by default named after ``project`` and ``store``).
    others
        The other projects the view shows, each with its open store: their agents and what
        waits in them join the agents table and the inbox.
    cleaner
        Redacts the strings (kept across calls by a live view: see :class:`Cleaner`); a new
        one with ``redactor`` when omitted.
    fleet
        The fleet's agents (``[fleet]``): every agent row then names its ``node``, the
        agents of other nodes join the table and their questions the inbox.
    """
    if home is None:
        key = project_key(project) if project is not None else store.path.parent.name
        home = ProjectRef(key, project, store.path)
    status = collect(store, events=events)
    runs, items = _epics(store)
    pipelines = _pipelines(project)
    theirs = [(ref, _pipelines(ref.root)) for ref, _ in others]
    owned = _owned(panes, home, loop_session, theirs, pipelines)
    mine = owned.get(home.key, []) + owned.get(None, [])
    recorded = {r["session"] for r in pipelines if r.get("session")}
    sessions = tmux_sessions(mine, loop=loop_session, pipelines=recorded)
    agents = _agents(status, mine, home)
    asked_elsewhere: list[dict[str, t.Any]] = []
    if fleet is not None:
        agents, asked_elsewhere = _fleet(agents, fleet, home)
    inbox = [
        project_inbox(
            store, home, agents=agents, pipelines=pipelines,
            panes=approval_panes(mine, pipelines),
        ),
        asked_elsewhere,
    ]  # fmt: skip
    for (ref, other), (_, pipes) in zip(others, theirs, strict=True):
        their_panes = owned.get(ref.key, [])
        rows = _agents(collect(other, events=0), their_panes, ref)
        agents += rows
        inbox.append(
            project_inbox(
                other, ref, agents=rows, pipelines=pipes,
                panes=approval_panes(their_panes, pipes),
            )
        )  # fmt: skip
    waiting = merge(*inbox)
    _mark_approvals(agents, waiting)
    # Another node's router runs these: listed (marked with its node) to be answered here.
    ids = {tk["id"] for tk in status["tasks"]}
    elsewhere = [] if fleet is None else remote_tasks(fleet.asks, fleet.node, ids)
    # Every workflow keeps its questions under its own key (agent name, "<run>.step-<n>",
    # "epic.<session>"...): list them all, not only the loop's agents'.
    by_key = {(i["project_key"], i["agent"]): i for i in waiting if i["kind"] == "approval"}
    approvals = [
        asked_on_node_row(i["agent"], i["what"], i["command"], i["since"], i["node"])
        | {"project": home.name, "project_key": home.key, "pane": None}
        for i in asked_elsewhere
        if i["kind"] == "approval"
    ]
    for ref, st in [(home, store), *others]:
        for p in all_pending(st):
            item = by_key.get((ref.key, p.agent))
            approvals.append(
                {**approval_row(p), "project": ref.name, "project_key": ref.key,
                 "pane": item["pane"] if item else None}
            )  # fmt: skip
    data = {
        "project": str(project) if project else None,
        "projects": [
            {
                "name": ref.name,
                "key": ref.key,
                "dir": str(ref.root) if ref.root else None,
                "home": ref is home,
            }
            for ref in [home, *(r for r, _ in others)]
        ],
        "inbox": waiting,
        "sessions": sessions + epic_sessions(runs) + bridge_sessions(store),
        "agents": agents,
        "approvals": approvals,
        "tasks": status["tasks"] + elsewhere,
        "messages": status["messages"],
        "mail": _mail(store),
        "managers": _managers(store),
        "pipelines": pipelines,
        "epic_runs": runs,
        "work_items": items,
        "events": status["events"],
    }
    if cleaner is None:
        cleaner = Cleaner(redactor)
    return t.cast("dict[str, t.Any]", cleaner.clean(data))
