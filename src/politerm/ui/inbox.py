"""The inbox: everything that waits on a person, of every project a view shows, newest first.

One list for both views (and, later, a fleet of machines: each machine's items carry their
project, so lists from several sources merge with :func:`merge`). An item is plain data:

- ``kind``: ``approval`` (an agent asks to run a command), ``question`` (a task waits for an
  answer), ``gate`` (a pipeline run waits at a gate), ``message`` (a message between agents
  that could not be delivered: stranded or dead-lettered), ``limited`` (an agent waits for its
  usage limit to reset), ``budget`` (a task stopped at its token budget);
- ``project`` / ``project_dir`` / ``agent`` / ``pane``: whose it is (``pane`` when the agent
  has one on the private server, so its page can be opened);
- ``what``: one line (the command, the question, ...), ``detail``: more lines (the screen);
- ``since``: when it started waiting (epoch seconds), the sort key;
- ``actions``: what the views offer in place (``approve``/``deny``, ``answer``, ``gate``), each
  answered through :mod:`politerm.ui.actions` with ``ref`` (what the view showed, so a stale
  button is refused). Limits and budget stops have no action: they only say so.
"""

from __future__ import annotations

import typing as t

from politerm.agents.approval import all_pending

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from politerm.driver.panes import PaneEntry
    from politerm.store import RunStore
    from politerm.ui.projects import ProjectRef

#: Every kind of item, in the words the views print.
KINDS = {
    "approval": "approval",
    "question": "question",
    "gate": "gate",
    "message": "undelivered message",
    "limited": "usage limit",
    "budget": "budget stop",
}


def approval_panes(
    panes: Sequence[PaneEntry], pipelines: Sequence[Mapping[str, t.Any]]
) -> dict[str, str]:
    r"""Approval key (upper-cased) → pane id, for every agent pane whose questions have a key.

    A loop's or manager's agent asks under its own name; a pipeline step under
    ``<run id>.step-<n>`` (:func:`politerm.pipeline.stepagent.approval_key`) while its pane is
    tagged ``step-<n>`` in the session the run recorded.

    Examples
    --------
    >>> from politerm.driver.panes import parse_panes
    >>> ps = parse_panes("run\tw\t%4\tstep-2\t0\tsh\t80\t24\t0\t\n"
    ...                  "poli\tw\t%1\tEXECUTER\t0\tsh\t80\t24\t0\t/p\n")
    >>> approval_panes(ps, [{"run_id": "r1", "session": "run"}])
    {'STEP-2': '%4', 'R1.STEP-2': '%4', 'EXECUTER': '%1'}
    """
    runs = {str(r["session"]): str(r["run_id"]) for r in pipelines if r.get("session")}
    out: dict[str, str] = {}
    for p in panes:
        if not p.agent or p.dead:
            continue
        out[p.agent.upper()] = p.pane_id
        run = runs.get(p.session)
        if run is not None and p.agent.startswith("step-"):
            out[f"{run}.{p.agent}".upper()] = p.pane_id
    return out


def _item(
    project: ProjectRef, kind: str, agent: str, what: str, since: float, **rest: t.Any
) -> dict[str, t.Any]:
    item: dict[str, t.Any] = {
        "kind": kind,
        "kind_words": KINDS[kind],
        "project": project.name,
        "project_key": project.key,
        "project_dir": str(project.root) if project.root is not None else None,
        "agent": agent,
        "pane": None,
        "what": what,
        "detail": "",
        "since": since,
        "actions": [],
        "ref": {},
    }
    item.update(rest)
    item["id"] = f"{project.key}:{kind}:{agent}:{since}"
    return item


def asked_on_node(
    project: ProjectRef, agent: str, node: str, approval: Mapping[str, t.Any]
) -> dict[str, t.Any]:
    """The approval an agent of another node of the fleet waits on (its board row's).

    Answered through its node (:func:`politerm.engine.fleetboard.approve_remote`): its
    ``ref`` names the node as well as the question.
    """
    ref = {
        "agent": agent,
        "asked": approval.get("asked"),
        "command": approval.get("command", ""),
        "node": node,
    }
    return _item(
        project, "approval", agent, str(approval.get("what", "")),
        float(approval.get("asked") or 0.0), command=ref["command"],
        detail=f"asked on node {node}", actions=["approve", "deny"], ref=ref, node=node,
    )  # fmt: skip


def task_asked_on_node(project: ProjectRef, ask: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The question a task of another node's router waits on (its published question).

    Answered through the router holding the fleet's router role
    (:func:`politerm.engine.fleetanswers.answer_task_remote`), naming the question shown.
    """
    node, task = str(ask["node"]), str(ask["task"])
    ref = {"task": task, "question": ask["question"], "node": node}
    return _item(
        project, "question", str(ask.get("agent") or ""), str(ask["question"]),
        float(ask.get("asked") or 0.0), task=task, actions=["answer"], ref=ref, node=node,
        detail=f"task {task}, asked on node {node}",
    )  # fmt: skip


def project_inbox(
    store: RunStore,
    project: ProjectRef,
    *,
    agents: Sequence[Mapping[str, t.Any]] = (),
    pipelines: Sequence[Mapping[str, t.Any]] = (),
    panes: Mapping[str, str] | None = None,
    events: int = 200,
) -> list[dict[str, t.Any]]:
    """What waits on a person in one project (not yet redacted; newest first).

    Parameters
    ----------
    store
        The project's run store.
    project
        The project, named on each item.
    agents
        The project's agent rows (:func:`politerm.ui.overview.collect_overview`'s ``agents``):
        a LIMITED one is an item.
    pipelines
        Its pipeline runs (``politerm.pipeline.ops.project_status``): an open gate is an item.
    panes
        Approval key (upper-cased) → pane id (:func:`approval_panes`).
    events
        How many recent events are searched for budget stops.
    """
    from politerm.store.models import MessageState, TaskState

    panes = panes or {}
    items: list[dict[str, t.Any]] = []
    for pending in all_pending(store):
        if pending.answer is not None:
            continue
        name = pending.agent
        items.append(
            _item(
                project, "approval", name, pending.what, pending.asked,
                pane=panes.get(name.upper()), command=pending.command,
                detail="\n".join(pending.evidence), actions=["approve", "deny"],
                ref={"agent": name, "asked": pending.asked, "command": pending.command},
            )
        )  # fmt: skip
    turns = {tn.task_id: tn.agent for tn in store.list_turns()}
    for task in store.list_tasks():
        if task.state is TaskState.WAITING_USER and task.question:
            agent = turns.get(task.id, "")
            items.append(
                _item(
                    project, "question", agent, task.question, task.updated,
                    pane=panes.get(agent.upper()), task=task.id, actions=["answer"],
                    detail=task.request, ref={"task": task.id, "question": task.question},
                )
            )  # fmt: skip
    for run in pipelines:
        q = run.get("question")
        if not q:
            continue
        agent = f"step-{q.get('step')}"
        items.append(
            _item(
                project, "gate", agent, str(q.get("question", "")), float(q.get("asked", 0.0)),
                pane=panes.get(f"{run['run_id']}.{agent}".upper()), run_id=run["run_id"],
                detail=f"pipeline {run.get('pipeline')}, run {run['run_id']}", actions=["gate"],
                ref={"run_id": run["run_id"], "seq": q.get("seq", 0)},
            )
        )  # fmt: skip
    for m in store.list_messages(state={MessageState.DEAD}):
        items.append(
            _item(
                project, "message", m.recipient, f"{m.type} from {m.sender} not delivered",
                m.updated, pane=panes.get(m.recipient.upper()), task=m.task_id,
                detail=m.last_error or "", message=m.id,
            )
        )  # fmt: skip
    items += _stranded(store, project, panes)
    for a in agents:
        if a.get("state") == "limited":
            limit = a.get("limit") or {}
            since = limit.get("since") or a.get("last_activity") or 0.0
            items.append(
                _item(
                    project, "limited", a["name"], a.get("state_words") or "limited",
                    float(since), pane=a.get("pane"), resets_at=limit.get("resets_at"),
                )
            )  # fmt: skip
    failed = {tk.id for tk in store.list_tasks() if tk.state is TaskState.FAILED}
    for e in store.list_events(limit=events):
        if e.kind == "budget" and e.task_id in failed:
            agent = e.agent or ""
            items.append(
                _item(
                    project, "budget", agent, e.detail, e.ts, pane=panes.get(agent.upper()),
                    task=e.task_id,
                )
            )  # fmt: skip
    return merge(items)


def _stranded(
    store: RunStore, project: ProjectRef, panes: Mapping[str, str]
) -> list[dict[str, t.Any]]:
    """Mail between agents that was dead-lettered: retries spent, nobody took it."""
    from politerm.store.mail import Mailbox, MailState

    return [
        _item(
            project, "message", m.recipient, f"{m.kind.value} from {m.sender} {m.state.value}",
            m.created, pane=panes.get(m.recipient.upper()), detail=m.reason or "", mail=m.id,
        )
        for m in Mailbox(store).select(states=[MailState.DEAD], limit=50)
    ]  # fmt: skip


def merge(*lists: Iterable[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Several inboxes as one, newest first (ties keep their order).

    Examples
    --------
    >>> [i["since"] for i in merge([{"since": 1}, {"since": 5}], [{"since": 3}])]
    [5, 3, 1]
    """
    out = [item for items in lists for item in items]
    out.sort(key=lambda i: -float(i.get("since") or 0.0))
    return out
