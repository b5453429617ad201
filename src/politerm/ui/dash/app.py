"""``poli dash``: the terminal dashboard (Textual).

Sessions, agents (state, pane, last activity, tokens), approvals, tasks, messages, pipeline
steps and gates, work items and the event log, redrawn when the store or tmux says something
changed; a live mirror of the selected agent's pane fed by tmux's ``%output`` bytes through
pyte. Keys act on the exact question shown (see :mod:`politerm.ui.actions`).
"""

from __future__ import annotations

import asyncio
import functools
import typing as t

from rich.text import Text
from textual.app import App
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Input, Label, Static, TabbedContent

from politerm._internal.clock import time_of_day
from politerm.driver.panes import attach_argv, attach_env
from politerm.errors import PolitermError
from politerm.status import on_node
from politerm.ui import actions
from politerm.ui.dash.modals import CSS as MODAL_CSS
from politerm.ui.dash.modals import AskScreen, ConfirmScreen, GateScreen
from politerm.ui.dash.screen import render_screen
from politerm.ui.dash.tables import Row, Tables, differ
from politerm.ui.live import LiveState
from politerm.ui.overview import ATTENTION, FINISHED

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Awaitable, Callable, Sequence

    from textual.app import ComposeResult

    from politerm.config import Config
    from politerm.store import RunStore
    from politerm.ui.mirror import ScreenMirror
    from politerm.ui.projects import ProjectRef

#: The keys that answer an inbox item in place.
_KEYS = {"approval": "a / d", "question": "n", "gate": "g"}

_STATE_STYLE = {
    "waiting_approval": "bold yellow",
    "stuck": "bold yellow",
    "limited": "bold yellow",
    "exited": "bold red",
    "node lost": "bold red",
    "busy": "cyan",
    "ready": "green",
}


class MirrorView(Static):
    """The selected agent's screen, redrawn on every chunk of its output."""

    def __init__(self, **kwargs: t.Any) -> None:
        super().__init__("select an agent to mirror its pane", markup=False, **kwargs)
        self.screen_mirror: ScreenMirror | None = None

    def show(self, mirror: ScreenMirror | None) -> None:
        """Mirror ``mirror`` (None: nothing)."""
        self.screen_mirror = mirror
        self.redraw()

    def redraw(self) -> None:
        """Draw the mirror's screen as it is now."""
        if self.screen_mirror is not None:
            # Its size is the layout's, not the screen's: no layout pass per output chunk.
            self.update(render_screen(self.screen_mirror.screen), layout=False)


class DashApp(App[None]):
    """The dashboard over one project's :class:`politerm.ui.live.LiveState`.

    Parameters
    ----------
    config, store, project
        The project whose runs to show.
    agent
        Mirror this agent (or pane id) from the start.
    """

    TITLE = "poli dash"
    AUTO_FOCUS = "#agents"  # not the (hidden) filter box: keys must reach the bindings
    CSS = (
        MODAL_CSS
        + """
    #left { width: 3fr; }
    #right { width: 4fr; }
    #filter { display: none; }
    #filter.shown { display: block; }
    DataTable { height: auto; max-height: 12; }
    #agents { max-height: 14; }
    #mirror { height: 1fr; overflow: hidden; background: black; text-wrap: nowrap;
              text-overflow: clip; }
    #mirror-title { background: $primary-darken-2; width: 100%; }
    #events { height: 9; border-top: solid $primary; }
    .section { color: $success; margin-top: 1; }
    Screen.zoom #left, Screen.zoom #events { display: none; }
    """
    )
    BINDINGS: t.ClassVar = [
        Binding("a", "approve", "approve"),
        Binding("d", "deny", "deny"),
        Binding("n", "answer", "answer"),
        Binding("g", "gate", "gate"),
        Binding("x", "abort", "abort task"),
        Binding("t", "attach", "attach pane"),
        Binding("z", "zoom", "zoom mirror"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        config: Config,
        store: RunStore,
        *,
        project: pathlib.Path | None = None,
        agent: str | None = None,
        live: LiveState | None = None,
        others: Sequence[ProjectRef] = (),
    ) -> None:
        super().__init__()
        self.live = live or LiveState(config, store, project=project, others=others)
        self.overview: dict[str, t.Any] = {}
        self.selected_agent: str | None = agent
        self.selected_task: str | None = None
        self.selected_item: str | None = None
        self.filter_text = ""
        self.mirror_name: str | None = None
        """The mirrored pane's id (None: nothing mirrored)."""
        self._mirrored: tuple[str, str] | None = None  # its pane id and agent, upper-cased
        self.screen_mirror: ScreenMirror | None = None
        self._stop_mirror: Callable[[], None] | None = None
        self._unlisten: Callable[[], None] | None = None
        self.messages_shown: list[str] = []
        self.overview_frozen = False
        self._mirror_lock = asyncio.Lock()
        self.tables = Tables()
        self._agent_rows: dict[str, tuple[str | None, str]] = {}  # row key -> pane, agent
        self._events_drawn: Text | None = None
        self._inbox_title = ""

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """The widgets."""
        yield Header()
        with Horizontal():
            with Vertical(id="left"):
                yield Input(placeholder="filter (escape clears)", id="filter")
                yield Label("inbox", id="inbox-title", classes="section")
                yield DataTable(id="inbox", cursor_type="row")
                yield Label("agents", classes="section")
                yield DataTable(id="agents", cursor_type="row")
                tabs = ("tasks", "messages", "mail", "sessions", "pipelines", "work", "manager")
                with TabbedContent(*tabs):
                    for name in tabs:
                        yield DataTable(id=name, cursor_type="row")
            with Vertical(id="right"):
                yield Label("mirror", id="mirror-title")
                yield MirrorView(id="mirror")
        yield Static(id="events", markup=False)
        yield Footer()

    async def on_mount(self) -> None:
        """Set up the tables, then follow the live state."""
        columns = {
            # A fleet lists every node's agents: which node each runs on is a column.
            "agents": (
                "agent",
                *(("node",) if self.live.config.fleet is not None else ()),
                *("state", "session", "pane", "last activity", "tokens", "turn"),
            ),
            "inbox": ("waits", "project", "agent", "what", "since", "keys"),
            "tasks": ("task", "state", "round", "request", "question / error / report"),
            "messages": ("id", "task", "from → to", "type", "state", "attempts", "error"),
            "sessions": ("session", "kind", "where", "panes", "agents"),
            "pipelines": ("run", "step", "agent", "status", "gate", "question"),
            "work": ("kind", "id", "epic", "title / agent", "state"),
            "mail": ("id", "kind", "from → to", "state", "attempts", "reason"),
            "manager": ("project", "state", "agent", "task", "status", "question / error"),
        }
        for name, cols in columns.items():
            self.tables.add_columns(self.query_one(f"#{name}", DataTable), cols)
        await self.live.start()
        if self.selected_agent:
            await self._mirror(self.selected_agent)
        self._unlisten = self.live.listen(self._show)
        self._show(self.live.overview)

    async def on_unmount(self) -> None:
        """Stop the mirror and the live state."""
        self.overview_frozen = True
        if self._unlisten is not None:
            self._unlisten()
        if self._stop_mirror is not None:
            self._stop_mirror()
        await self.live.close()

    # --- drawing --------------------------------------------------------------------------

    def _keep(self, *cells: object) -> bool:
        if not self.filter_text:
            return True
        return any(self.filter_text in str(c).lower() for c in cells)

    def _fill(self, name: str, rows: Sequence[Row]) -> None:
        # Refilled, the agents' table keeps its cursor on the mirrored agent.
        mirrored = self._is_mirrored if name == "agents" else None
        self.tables.fill(self.query_one(f"#{name}", DataTable), rows, self._keep, mirrored)

    def _is_mirrored(self, key: str) -> bool:
        pane, agent = self._agent_rows.get(key, (None, ""))
        return (pane, agent.upper()) == self._mirrored

    @property
    def rows_drawn(self) -> int:
        """How many table rows the refreshes added or changed (a row drawn again counts)."""
        return self.tables.rows_drawn

    def _show(self, data: dict[str, t.Any]) -> None:
        self.overview = data
        if self.overview_frozen:
            return
        fleet = self.live.config.fleet is not None  # the agents' table has a node column
        agents = data.get("agents", [])
        # A pane id is unique on its own server only (a session of many agents spans several,
        # and other projects have their own): a row is its project's, node's and agent's.
        keys = [f"{a['project_key']}/{a.get('node') or ''}/{a['name']}" for a in agents]
        self._agent_rows = {k: (a["pane"], a["name"]) for k, a in zip(keys, agents, strict=True)}
        self._fill(
            "agents",
            [
                (
                    key,
                    (
                        a["name"], *((a.get("node") or "-",) if fleet else ()),
                        Text(a["state_words"], style=_STATE_STYLE.get(a["state"], "")),
                        a["session"] or "-", a["pane"] or "-", time_of_day(a["last_activity"]),
                        a["tokens"] if a["tokens"] is not None else "-", a["turn"] or "-",
                    ),
                )
                for key, a in zip(keys, agents, strict=True)
            ],
        )  # fmt: skip
        shown = ", ".join(p["name"] for p in data.get("projects", []))
        waiting = data.get("inbox", [])
        title = f"inbox: {len(waiting)} waiting on you · projects: {shown or '-'}"
        if title != self._inbox_title:  # an update lays the whole screen out again
            self._inbox_title = title
            self.query_one("#inbox-title", Label).update(title)
        self._fill(
            "inbox",
            [
                (i["id"], (Text(on_node(i["kind_words"], i.get("node")), style="bold yellow"),
                           i["project"], i["agent"] or "-", i["what"][:80], time_of_day(i["since"]),
                           _KEYS.get(i["kind"], "")))
                for i in waiting
            ],
        )  # fmt: skip
        self._fill(
            "tasks",
            [
                (tk["id"], (on_node(tk["id"], tk.get("node")), tk["state"],
                            "-" if tk["round"] is None else tk["round"], tk["request"][:50],
                            tk["question"] or tk["error"] or (tk["report"] or "")[:80]))
                for tk in data.get("tasks", [])
            ],
        )  # fmt: skip
        self._fill(
            "messages",
            [
                (str(m["id"]), (m["id"], m["task"] or "-", f"{m['from']} → {m['to']}", m["type"],
                                m["state"], m["attempts"], m["error"] or ""))
                for m in data.get("messages", [])
            ],
        )  # fmt: skip
        self._fill(
            "sessions",
            [
                (s["name"], (s["name"], s["kind"], s["where"], s["panes"], ", ".join(s["agents"])))
                for s in data.get("sessions", [])
            ],
        )
        rows: list[Row] = []
        for run in data.get("pipelines", []):
            q = run.get("question") or {}
            for s in run["steps"]:
                asks = q.get("question", "") if q.get("step") == s["num"] else ""
                row = (run["run_id"], s["num"], s["agent"], s["status"], s["gate"], asks)
                rows.append((f"{run['run_id']}:{s['num']}", row))
        self._fill("pipelines", rows)
        work: list[Row] = [
            (f"run:{r['id']}", ("epic run", r["id"], r["epic"], r["agent"], r["state"]))
            for r in data.get("epic_runs", [])
        ]
        work += [
            (f"item:{i['id']}", ("item", i["id"], i["epic"], i["title"], i["state"]))
            for i in data.get("work_items", [])
        ]
        self._fill("work", work)
        self._fill(
            "mail",
            [
                (m["id"], (m["id"], m["kind"], f"{m['from']} → {m['to']}", m["state"],
                           m["attempts"], m["reason"] or ""))
                for m in data.get("mail", [])
            ],
        )  # fmt: skip
        self._fill(
            "manager",
            [
                (p["name"], (p["name"], p["state"], p["agent"], p["task_goal"] or p["goal"],
                             p["task_status"] or "-", p["question"] or p["error"] or ""))
                for p in data.get("managers", [])
            ],
        )  # fmt: skip
        lines = Text()
        for e in data.get("events", [])[-8:]:
            style = "bold yellow" if e["kind"] in ATTENTION else ""
            style = "bold green" if e["kind"] == "done" else style
            style = "bold red" if e["kind"] in FINISHED - {"done"} else style
            who = f"[{e['agent']}] " if e["agent"] else ""
            detail = " ".join(e["detail"].split())[:160]
            lines.append(f"{time_of_day(e['ts'])} {e['kind']:<14} {who}{detail}\n", style=style)
        if self._events_drawn is None or differ(lines, self._events_drawn):
            self._events_drawn = lines
            # Its size is fixed (CSS): no need to lay the screen out again.
            self.query_one("#events", Static).update(lines, layout=False)

    # --- the mirror -----------------------------------------------------------------------

    async def _mirror(self, name: str, pane_id: str | None = None) -> None:
        async with self._mirror_lock:
            await self._switch_mirror(name, pane_id)

    async def _switch_mirror(self, name: str, pane_id: str | None = None) -> None:
        entry = self.live.pane(name, pane_id)
        if entry is not None:
            name, pane_id = entry.agent or entry.pane_id, entry.pane_id
        if entry is not None and self._mirrored == (entry.pane_id, (entry.agent or "").upper()):
            return
        if self._stop_mirror is not None:
            self._stop_mirror()
            self._stop_mirror = None
        view = self.query_one("#mirror", MirrorView)
        title = self.query_one("#mirror-title", Label)
        try:
            screen: ScreenMirror | None = None

            def sink(data: bytes) -> None:
                if screen is not None:
                    screen.feed(data)
                    view.redraw()

            mirror = await self.live.mirror(name, sink, pane_id=pane_id)
        except PolitermError as exc:
            title.update(f"mirror: {exc}")
            return
        # Imported when a pane is first mirrored: pyte is not needed to draw the tables.
        from politerm.ui.mirror import ScreenMirror

        screen = ScreenMirror(mirror.width, mirror.height)
        screen.feed(mirror.initial)
        self.screen_mirror, self.mirror_name = screen, mirror.pane_id
        self._stop_mirror = mirror.stop
        entry = self.live.pane(name, pane_id)
        self._mirrored = (entry.pane_id, (entry.agent or "").upper()) if entry else None
        label = entry.label if entry else name
        title.update(f"{label} ({mirror.pane_id}, {mirror.width}×{mirror.height}) live")
        view.show(screen)

    async def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Follow the selection: agents are mirrored, tasks and approvals chosen."""
        key = None if event.row_key.value is None else str(event.row_key.value)
        table = event.data_table.id
        # Refills move the cursor too; only a person moving it (table focused) switches.
        if not event.data_table.has_focus:
            return
        if table == "agents" and key:
            pane, agent = self._agent_rows.get(key, (None, key))
            self.selected_agent = agent
            await self._mirror(agent, pane)
        elif table == "inbox" and key:
            self.selected_item = key
        elif table == "tasks" and key:
            self.selected_task = key

    # --- actions --------------------------------------------------------------------------

    def _say(self, text: str, *, error: bool = False) -> None:
        self.messages_shown.append(text)
        self.notify(text, severity="error" if error else "information", markup=False)

    def _waiting(self, kind: str) -> dict[str, t.Any] | None:
        """The inbox item of ``kind`` to act on: the selected one, the agent's, or the newest."""
        items = [i for i in self.overview.get("inbox", []) if i["kind"] == kind]
        chosen = next((i for i in items if i["id"] == self.selected_item), None)
        if chosen is None and self.selected_agent:
            entry = self.live.pane(self.selected_agent)
            names = {self.selected_agent.upper(), entry.agent.upper() if entry else ""}
            pane = entry.pane_id if entry else None
            chosen = next(
                (i for i in items if i["agent"].upper() in names or (pane and i["pane"] == pane)),
                None,
            )
        return chosen or (items[0] if items else None)

    def _answer_approval(self, deny: bool) -> None:
        pending = self._waiting("approval")
        if pending is None:
            self._say("no approval question is open", error=True)
            return
        verb = "deny" if deny else "approve"
        question = (
            f"{pending['agent']} ({pending['project']}) wants to run: {pending['what']}\n\n"
            + pending["detail"]
        )
        ref = actions.ApprovalRef(**pending["ref"])

        def done(yes: bool | None) -> None:
            if yes and self.live.remote_node(ref.node):
                # Answered on the agent's node: waited for off the screen's loop.
                there = functools.partial(self.live.approve_remote, ref, deny=deny, by="dash")
                self.run_worker(self._run_async(lambda: asyncio.to_thread(there)), exclusive=False)
            elif yes:

                def act() -> str:
                    store, _ = self.live.project_of(pending["project_key"])
                    return actions.approve(store, ref, deny=deny, by="dash")

                self._run(act)

        self.push_screen(ConfirmScreen(f"{verb} this?", question), done)

    def action_approve(self) -> None:
        """Approve the open question of the selected agent (asks first)."""
        self._answer_approval(deny=False)

    def action_deny(self) -> None:
        """Deny the open question of the selected agent (asks first)."""
        self._answer_approval(deny=True)

    async def _run_async(self, act: Callable[[], Awaitable[str]]) -> None:
        """What ``act`` (waited for in a worker, off the screen's loop) said, shown."""
        try:
            said = await act()
        except PolitermError as exc:
            self._say(f"refused: {exc}", error=True)
            return
        self._say(said)
        self.live.poke()

    def _run(self, act: Callable[[], str]) -> None:
        try:
            said = act()
        except PolitermError as exc:
            self._say(f"refused: {exc}", error=True)
            return
        self._say(said)
        self.live.poke()

    def action_answer(self) -> None:
        """Answer the question the selected (or the first waiting) task asks."""
        items = [i for i in self.overview.get("inbox", []) if i["kind"] == "question"]
        item = next((i for i in items if i["task"] == self.selected_task), None)
        item = item or self._waiting("question")
        if item is None:
            self._say("no task is waiting for an answer", error=True)
            return
        task_id, question, key = item["task"], item["what"], item["project_key"]
        remote = self.live.remote_node(item.get("node"))

        def done(text: str | None) -> None:
            if text is not None and remote:
                # Another node's router runs it: waited for off the screen's loop.
                there = functools.partial(
                    self.live.answer_remote, task_id, question, text, by="dash"
                )
                self.run_worker(self._run_async(lambda: asyncio.to_thread(there)), exclusive=False)
            elif text is not None:

                def act() -> str:
                    store, _ = self.live.project_of(key)
                    config = self.live.config_of(key)
                    return actions.answer(store, config, task_id, question, text, by="dash")

                self._run(act)

        self.push_screen(AskScreen(f"task {task_id} ({item['project']}) asks:", question), done)

    def action_gate(self) -> None:
        """Answer the gate a pipeline run waits on."""
        item = self._waiting("gate")
        if item is None:
            self._say("no pipeline run is waiting at a gate", error=True)
            return
        run_id, seq = item["ref"]["run_id"], int(item["ref"]["seq"])
        _, ref = self.live.project_of(item["project_key"])
        project = ref.root or self.live.project

        def done(reply: str | None) -> None:
            if reply is not None and project is not None:
                self._run(lambda: actions.gate(project, run_id, seq, reply, by="dash"))

        title = f"run {run_id} {item['agent']} ({item['project']}):"
        self.push_screen(GateScreen(title, item["what"]), done)

    def action_abort(self) -> None:
        """Abort the selected task (asks first)."""
        tasks = {tk["id"]: tk for tk in self.overview.get("tasks", [])}
        task = tasks.get(self.selected_task or "")
        if task is None:
            self._say("select a task to abort (tasks tab)", error=True)
            return

        def done(yes: bool | None) -> None:
            if yes:
                stop = functools.partial(
                    actions.abort, self.live.store, self.live.config, task["id"], by="dash"
                )
                self.run_worker(self._run_async(stop), exclusive=True)

        self.push_screen(
            ConfirmScreen("abort this task?", f"{task['id']}: {task['request']}"), done
        )

    def action_attach(self) -> None:
        """Show the selected agent's pane in this terminal (tmux attach); back on detach."""
        entry = self.live.pane(self.selected_agent or "")
        if entry is None:
            self._say("select an agent to attach to", error=True)
            return
        argv = attach_argv(entry.socket or self.live.observer.socket, entry.pane_id)
        if not self.is_headless:
            import subprocess

            with self.suspend():
                subprocess.run(argv, env=attach_env(), check=False)
            return
        self._say("attach: " + " ".join(argv))

    def action_zoom(self) -> None:
        """Show only the mirror (again: everything)."""
        self.screen.toggle_class("zoom")

    def action_filter(self) -> None:
        """Show the filter box."""
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        self.call_after_refresh(box.focus)  # a hidden widget cannot take focus yet

    def action_clear_filter(self) -> None:
        """Hide the filter box and show everything again."""
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.query_one("#agents", DataTable).focus()
        self.filter_text = ""
        self._show(self.overview)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter every table by the text typed."""
        if event.input.id == "filter":
            self.filter_text = event.value.strip().lower()
            self._show(self.overview)
