"""The status of a run store: agents, tasks, message queues, recent events."""

from __future__ import annotations

import json
import time
import typing as t

from politerm._internal.clock import time_of_day
from politerm._internal.sanitize import escape_controls
from politerm.agents.approval import list_pending
from politerm.agents.limits import reset_in_words
from politerm.agents.state import AgentState
from politerm.driver.tokens import all_stored_tokens, stored_tokens
from politerm.engine.fleetmeta import ROUTER_META, budget_paused
from politerm.redact import map_strings
from politerm.store.limits import open_limits
from politerm.store.models import MessageState

if t.TYPE_CHECKING:
    from rich.console import RenderableType

    from politerm.agents.approval import PendingApproval
    from politerm.store import RunStore
    from politerm.store.models import Agent, Event

_OPEN = (MessageState.QUEUED, MessageState.RETRIED, MessageState.DELIVERING, MessageState.DEAD)


def approval_row(p: PendingApproval) -> dict[str, t.Any]:
    """A pending approval as ``poli status --json`` and the views show it."""
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


def asked_on_node_row(
    agent: str, what: str, command: str, asked: float | None, node: str
) -> dict[str, t.Any]:
    """An approval another node's agent waits on, as :func:`approval_row` shows one."""
    return {
        "agent": agent, "tool": "", "command": command, "question": "", "what": what,
        "asked": asked, "answer": None, "evidence": [], "node": node,
    }  # fmt: skip


def event_row(e: Event) -> dict[str, t.Any]:
    """An event as ``poli status --json`` and the views show it."""
    return {
        "id": e.id,
        "ts": e.ts,
        "kind": e.kind,
        "task": e.task_id,
        "agent": e.agent,
        "detail": e.detail,
    }


def event_line(e: t.Mapping[str, t.Any]) -> str:
    """One line for an :func:`event_row`: time, task, kind, ``[agent]`` and the detail."""
    who = f"[{e['agent']}] " if e["agent"] else ""
    task = f"{e['task']} " if e["task"] else ""
    detail = " ".join(e["detail"].split())
    if len(detail) > 160:
        detail = detail[:157] + "..."
    return f"{time_of_day(e['ts'])} {task}{e['kind']:<12} {who}{detail}"


def on_node(text: str, node: str | None) -> str:
    """``text`` with the node it belongs to, when that is another machine's.

    Examples
    --------
    >>> on_node("T-1", None), on_node("T-2", "a")
    ('T-1', 'T-2 (node a)')
    """
    return f"{text} (node {node})" if node else text


def collect(
    store: RunStore,
    *,
    events: int = 15,
    live: t.Mapping[str, str] | None = None,
    resets: t.Mapping[str, float] | None = None,
    agents: t.Sequence[Agent] | None = None,
) -> dict[str, t.Any]:
    """Everything ``poli status`` shows, as plain data (``--json`` prints it as is).

    ``live`` maps agent names to their state as the driver's observer gives it (see
    :meth:`politerm.driver.observer.Observer.states`: EXITED once a pane is gone or dead);
    without it the state last stored is shown. A LIMITED agent's ``limit`` says when its
    limit resets: as its driver keeps it in the store, else as ``resets`` (read from its
    screen by the observer) says. ``agents``: the store's agents when the caller has just
    read them.
    """
    agents = store.list_agents() if agents is None else agents
    turns = {tn.agent: tn for tn in store.list_turns()}
    live = live or {}
    limits = open_limits(store)
    resets = resets or {}

    def limit(name: str, state: str) -> dict[str, t.Any] | None:
        if state != AgentState.LIMITED.value:
            return None
        held = limits.get(name)
        if held is not None:
            return {"resets_at": held.until, "since": held.since, "shown": held.shown}
        if name in resets:
            return {"resets_at": resets[name], "since": None, "shown": True}
        return {"resets_at": None, "since": None, "shown": False}

    def working_on(name: str) -> str | None:
        turn = turns.get(name)
        return turn.task_id if turn is not None else None

    # Counted from the agents' transcripts (politerm.driver.tokens); None: nothing read.
    # Read once for every agent and task: one query, not one per row.
    counted = {
        **{f"agent:{k}": v for k, v in all_stored_tokens(store, "agent").items()},
        **{f"task:{k}": v for k, v in all_stored_tokens(store, "task").items()},
    }

    def tokens(key: str) -> int | None:
        used = counted.get(key) if key != "run" else stored_tokens(store, key)
        return used.total if used else None

    paused = budget_paused(store)
    role = store.get_meta(ROUTER_META)

    return {
        "agents": [
            {
                "name": a.name,
                "state": live.get(a.name, a.state),
                "stored_state": a.state,
                "limit": limit(a.name, live.get(a.name, a.state)),
                "pane": a.pane_id,
                "profile": a.profile,
                "command": a.command,
                "turn": working_on(a.name),
                "tokens": tokens(f"agent:{a.name}"),
            }
            for a in agents
        ],
        "approvals": [approval_row(p) for p in list_pending(store, [a.name for a in agents])],
        "tasks": [
            {
                "id": tk.id,
                "state": tk.state.value,
                "round": tk.round,
                "request": tk.request,
                "question": tk.question,
                # Its remote turn waits for the fleet's budget: the breaker's reason.
                "paused": paused.get(tk.id),
                "error": tk.error,
                "report": tk.report,
                "tokens": tokens(f"task:{tk.id}"),
            }
            for tk in store.list_tasks()[-20:]
        ],
        "tokens": tokens("run"),
        # This machine's router in the fleet's router role: active, standby or fenced.
        "fleet_router": json.loads(role) if role else None,
        "messages": [
            {
                "id": m.id,
                "task": m.task_id,
                "from": m.sender,
                "to": m.recipient,
                "type": m.type,
                "state": m.state.value,
                "attempts": m.attempts,
                "error": m.last_error,
            }
            for m in store.list_messages(state=set(_OPEN))
        ],
        # The journal of turns' rows not ended: every workflow's prompts in flight.
        "turns": [row.to_json() for row in store.journal_open()],
        "events": [event_row(e) for e in (store.list_events(limit=events) if events else [])],
    }


def remote_rows(
    board: t.Sequence[t.Mapping[str, t.Any]], node: str, local: t.Collection[str]
) -> list[t.Mapping[str, t.Any]]:
    """The board's rows a view shows beside its own agents.

    Every row (:class:`politerm.fleet.board.BoardRow` as data) but those of ``local``, the
    agents this machine shows from its own store, on this ``node``.

    Examples
    --------
    >>> rows = [{"node": "a", "agent": "P"}, {"node": "b", "agent": "E"}]
    >>> [r["agent"] for r in remote_rows(rows, "a", {"P"})]
    ['E']
    """
    return [r for r in board if not (r["node"] == node and r["agent"] in local)]


def remote_tasks(
    asks: t.Sequence[t.Mapping[str, t.Any]], node: str, mine: t.Collection[str]
) -> list[dict[str, t.Any]]:
    """Task rows (as :func:`collect`'s) of the questions other nodes' routers published.

    ``asks``: :meth:`politerm.fleet.board.TaskAsk.to_json` of each; those of this ``node``
    or of a task this store has (``mine``) are left out: this machine shows its own.

    Examples
    --------
    >>> asks = [{"task": "T-1", "node": "a", "question": "which?", "agent": "PLANNER"}]
    >>> [(tk["id"], tk["node"], tk["state"]) for tk in remote_tasks(asks, "c", ())]
    [('T-1', 'a', 'waiting_user')]
    >>> remote_tasks(asks, "a", ())
    []
    """
    return [
        {
            "id": a["task"], "state": "waiting_user", "round": None, "request": "",
            "question": a["question"], "paused": None, "error": None, "report": None,
            "tokens": None, "node": a["node"], "agent": a["agent"],
        }
        for a in asks
        if a["node"] != node and a["task"] not in mine
    ]  # fmt: skip


def merge_fleet(
    data: dict[str, t.Any],
    board: t.Sequence[t.Mapping[str, t.Any]],
    node: str,
    elsewhere: t.Collection[str],
    asks: t.Sequence[t.Mapping[str, t.Any]] = (),
) -> dict[str, t.Any]:
    """:func:`collect`'s data with the fleet's agents: each row says its ``node``.

    The agents this machine does not drive (``elsewhere``) are shown from the board, as
    their nodes published them (``node lost`` when a node stopped beating), not from rows
    this store may keep of them; the questions they wait on join the approvals. The tasks
    another node's router runs that wait for an answer (``asks``,
    :meth:`politerm.fleet.board.TaskAsk.to_json`) join the tasks, each with its ``node``.
    """
    local = [{**a, "node": node} for a in data["agents"] if a["name"] not in elsewhere]
    names = {a["name"] for a in local}
    shown = remote_rows(board, node, names)
    remote = [
        {
            "name": r["agent"],
            "state": r["state"],
            "stored_state": r["last_state"],
            "limit": None,
            "pane": None,
            "profile": r["profile"],
            "command": None,
            "turn": r["turn"],
            "tokens": None,
            "node": r["node"],
            "since": r["since"],
            "seen": r["at"],
        }
        for r in shown
    ]
    approving = [
        asked_on_node_row(
            r["agent"], ap.get("what", ""), ap.get("command", ""), ap.get("asked"), r["node"]
        )
        for r in shown
        if (ap := r.get("approval"))
    ]
    approvals = [{**ap, "node": node} for ap in data["approvals"] if ap["agent"] not in elsewhere]
    waiting = remote_tasks(asks, node, {tk["id"] for tk in data["tasks"]})
    return {
        **data,
        "agents": local + remote,
        "approvals": approvals + approving,
        "tasks": data["tasks"] + waiting,
    }


def state_words(agent: dict[str, t.Any], now: float | None = None) -> str:
    """An agent's state as shown: a LIMITED agent's with when its limit resets.

    Examples
    --------
    >>> state_words({"state": "ready"})
    'ready'
    >>> state_words({"state": "limited", "limit": {"resets_at": None}})
    'limited (reset time not known)'
    >>> state_words({"state": "limited", "limit": {"resets_at": 1090.0}}, now=1000.0).endswith(
    ...     "(in 90s)")
    True
    """
    lim = agent.get("limit")
    if agent["state"] != AgentState.LIMITED.value or not lim:
        return str(agent["state"])
    if lim.get("resets_at") is None:
        return "limited (reset time not known)"
    at = float(lim["resets_at"])
    return f"limited · resets {reset_in_words(at, time.time() if now is None else now)}"


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "-"


def router_words(router: dict[str, t.Any] | None) -> str:
    """The line about the project's router service.

    Examples
    --------
    >>> router_words(None)
    'router: not running (start it with `poli up`)'
    >>> router_words({"pid": 7, "uptime": "3m05s", "router": 9, "restarts": 1})
    'router: service pid 7, up 3m05s (router pid 9, restarted 1 time)'
    """
    if router is None:
        return "router: not running (start it with `poli up`)"
    child = f"router pid {router['router']}" if router["router"] else "router starting"
    n = router["restarts"]
    again = f", restarted {n} time{'s' if n != 1 else ''}" if n else ""
    return f"router: service pid {router['pid']}, up {router['uptime']} ({child}{again})"


def role_words(role: t.Mapping[str, t.Any]) -> str:
    """The router of this machine in the fleet's router role, in words.

    Examples
    --------
    >>> print(role_words({"role": "standby", "holder": "b/s/p#2", "active": "a/s/p#1"}))
    fleet router role: standby (router a/s/p#1 routes; this one takes over when it stops)
    >>> role_words({"role": "active", "holder": "a/s/p#1", "token": 3})
    'fleet router role: active (token 3)'
    """
    if role.get("role") == "standby":
        return (
            f"fleet router role: standby (router {role.get('active')} routes; "
            "this one takes over when it stops)"
        )
    if role.get("role") == "fenced":
        return f"fleet router role: lost ({role.get('why')})"
    return f"fleet router role: active (token {role.get('token')})"


def fleet_words(fleet: dict[str, t.Any]) -> str:
    """The lines about this machine's fleet node and where each agent runs.

    Examples
    --------
    >>> print(fleet_words({"node": "a", "service": None,
    ...                    "placement": {"PLANNER": ["a"], "EXECUTER": ["b", "c"]}}))
    fleet node a: no node service (start it with `poli node`)
    agents: PLANNER on a, EXECUTER on b|c
    """
    service = fleet["service"]
    running = (
        f"node service pid {service['pid']}"
        if service
        else "no node service (start it with `poli node`)"
    )
    here = "the router's node"
    where = ", ".join(
        f"{name} on {'|'.join(hosts) if hosts else here}"
        for name, hosts in fleet["placement"].items()
    )
    unread = fleet.get("board_error")
    board = f"\nother nodes' agents not shown: {unread}" if unread else ""
    return f"fleet node {fleet['node']}: {running}\nagents: {where}{board}"


def render(data: dict[str, t.Any], *, max_agents: int | None = None) -> RenderableType:
    """A rich view of :func:`collect`'s data.

    ``max_agents`` caps the agents table's rows (the rest are counted in one last row): a
    live view of 500 agents in a 50-line terminal draws what the screen can show, not 500
    rows that the terminal crops anyway, on every change.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    rows = data["agents"]
    if max_agents is not None and len(rows) > max_agents:
        rows = rows[: max(1, max_agents - 1)]
    hidden = len(data["agents"]) - len(rows)
    # Everything below may hold agent text: shown escaped, never interpreted. Only the rows
    # drawn are escaped: escaping 500 agents' rows was most of a live redraw's work.
    data = map_strings({**data, "agents": rows}, escape_controls)
    if not (data["agents"] or data["tasks"] or data["messages"] or data["events"]):
        hint = Text(
            "Nothing here yet: no agents are up and no task was given in this project.\n"
            'Start the agents with `poli up`, then give them work with `poli task "..."` '
            "(or try it all on the bundled fake agents with `poli demo`)."
        )
        # In a fleet, say which node this is and whether the others could be read.
        return Group(hint, Text(fleet_words(data["fleet"]))) if data.get("fleet") else hint
    # A fleet's rows name their node (merge_fleet); one machine's have no such column.
    fleet = any("node" in a for a in data["agents"])
    agents = Table(title="agents", expand=True)
    for col in ("agent", *(("node",) if fleet else ()), "state", "pane", "profile", "tokens"):
        agents.add_column(col)
    agents.add_column("working on")
    for a in data["agents"]:
        agents.add_row(
            a["name"],
            *((a.get("node") or "-",) if fleet else ()),
            state_words(a),
            a["pane"] if a["pane"] is not None else "-",
            a["profile"],
            _count(a.get("tokens")),
            a["turn"] or "-",
        )
    if hidden:
        blank = ("",) * (5 if fleet else 4)
        agents.add_row(f"… {hidden} more", *blank, "poli status --json lists all")
    if data.get("tokens"):
        agents.caption = f"tokens in this run: {data['tokens']:,}"
    tasks = Table(title="tasks", expand=True)
    for col in ("task", "state", "round", "tokens", "request", "question / error / report"):
        tasks.add_column(col, overflow="fold")
    for tk in data["tasks"]:
        pause = tk.get("paused") and f"paused by the fleet's budget: {tk['paused']}"
        note = tk["question"] or pause or tk["error"] or (tk["report"] or "")[:120]
        row = (
            on_node(tk["id"], tk.get("node")),  # an answer given here goes to that node
            f"{tk['state']}, paused" if pause else tk["state"],
            "-" if tk["round"] is None else str(tk["round"]),
            _count(tk.get("tokens")),
            tk["request"][:60],
        )
        tasks.add_row(*row, note)
    queue = Table(title="messages not yet delivered", expand=True)
    for col in ("id", "task", "from → to", "type", "state", "attempts", "error"):
        queue.add_column(col, overflow="fold")
    for m in data["messages"]:
        queue.add_row(
            str(m["id"]), m["task"] or "-", f"{m['from']} → {m['to']}", m["type"], m["state"],
            str(m["attempts"]), m["error"] or "",
        )  # fmt: skip
    parts: list[RenderableType] = [agents, tasks]
    if data.get("turns"):
        turns = Table(title="prompts in flight (journal of turns)", expand=True)
        for col in ("turn", "agent", "workflow", "serves", "attempt", "state"):
            turns.add_column(col, overflow="fold")
        for tn in data["turns"]:
            serves = f"{tn['record']} {'/'.join(map(str, tn['record_key']))}"
            turns.add_row(
                str(tn["id"]), tn["agent"], tn["workflow"], serves, str(tn["attempt"]), tn["state"]
            )
        parts.append(turns)
    if "router" in data:
        parts.append(Text(router_words(data["router"])))
        if data["router"] is not None and data.get("fleet_router"):
            parts.append(Text(role_words(data["fleet_router"])))
    if data.get("fleet"):
        parts.append(Text(fleet_words(data["fleet"])))
    if data.get("approvals"):
        approvals = Table(title="approval questions waiting (poli approve AGENT [--deny])")
        asked_on = any("node" in ap for ap in data["approvals"])
        for col in ("agent", *(("node",) if asked_on else ()), "wants to run", "answer"):
            approvals.add_column(col, overflow="fold")
        approvals.add_column("on screen", overflow="fold")
        for ap in data["approvals"]:
            approvals.add_row(
                ap["agent"],
                *((ap.get("node") or "-",) if asked_on else ()),
                ap["what"],
                ap["answer"] or "-",
                " | ".join(ap["evidence"])[:160],
            )
        parts.append(approvals)
    lines = [event_line(e) for e in data["events"]]
    return Group(*parts, queue, Text("recent events", style="bold"), Text("\n".join(lines)))
