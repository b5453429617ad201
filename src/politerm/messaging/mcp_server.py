"""``poli mcp``: the messaging tools as an MCP server over stdio (official ``mcp`` SDK).

An agent CLI that politerm started with ``[agents.X] mcp = true`` runs this server as a
child; it inherits the agent's ``POLI_AGENT`` and ``POLI_CONFIG``, so every tool knows who
calls it and which session's store to use. Tools: list the agents, send a message (and
optionally wait for the answer), read the inbox, reply, hand off to the planner or the
pipeline's handoff file, report status. Every tool answers with JSON text; bad input is a
tool error with one line saying what is wrong, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import typing as t

from politerm.driver.observer import Observer
from politerm.errors import PolitermError
from politerm.hooks.mcp import SERVER_NAME
from politerm.messaging.service import USER, Messenger
from politerm.project import ENV_CONFIG
from politerm.store.mail import Capability, MailKind

if t.TYPE_CHECKING:
    from mcp.server import MCPServer

    from politerm.config import Config
    from politerm.pipeline.handoff import Layout

TOOL_NAMES: t.Final = (
    "list_agents",
    "send_message",
    "read_inbox",
    "reply",
    "handoff",
    "report_status",
)


def _dump(value: t.Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)


class Tools:
    """The tools' logic, callable without MCP (the server wraps each in a tool).

    Parameters
    ----------
    messenger
        The session's messages.
    config_path
        The configuration file, passed on to the service started by :meth:`send_message`.
    cwd
        Where pipeline handoff files are written (the agent's working directory).
    """

    def __init__(
        self,
        messenger: Messenger,
        config_path: pathlib.Path | None = None,
        cwd: pathlib.Path | None = None,
    ) -> None:
        self.m = messenger
        self.config_path = config_path
        self.cwd = cwd or pathlib.Path.cwd()

    async def list_agents(self) -> str:
        """The agents of this session: name, pane, profile and state.

        The state is the observer's: EXITED once the agent's pane is gone or dead, else
        what its driver last recorded. In a fleet, every agent of the project with the
        node it runs on (``node``): this machine's as above, the others' from the agents'
        board as their nodes published them (``node lost`` when a node stopped beating),
        as ``poli status`` shows them.
        """
        me = self.m.identity().agent
        agents = self.m.store.list_agents()
        async with Observer.of(self.m.config) as observer:
            states = await observer.states(agents)
        listed = [
            {
                "name": a.name,
                "pane": a.pane_id,
                "profile": a.profile,
                "state": states.get(a.name, a.state),
                "you": a.name == me,
            }
            for a in agents
        ]
        if self.m.config.fleet is not None:
            listed = await asyncio.to_thread(self._with_fleet, listed, me)
        return _dump(listed)

    def _with_fleet(self, listed: list[dict[str, t.Any]], me: str) -> list[dict[str, t.Any]]:
        """``listed`` with each agent's node, the other nodes' agents read from the board.

        Raises
        ------
        FleetError
            Redis could not be reached (one line; the other nodes' agents are unknown).
        """
        from politerm.engine.fleetboard import read_fleet
        from politerm.engine.placement import here_config

        config = self.m.config
        assert config.fleet is not None
        node = config.fleet.node
        away = set(here_config(config)[1])
        local = [{**a, "node": node} for a in listed if a["name"] not in away]
        names = {a["name"] for a in local}
        board = read_fleet(config, asks=False)[0]
        remote = [
            {
                "name": r["agent"],
                "pane": None,  # on its node's tmux server
                "profile": r["profile"],
                "state": r["state"],
                "you": r["agent"] == me and r["node"] == node,
                "node": r["node"],
            }
            for r in board
            if not (r["node"] == node and r["agent"] in names)
        ]
        return local + remote

    async def send_message(
        self,
        to: str,
        text: str,
        capability: str = "writable",
        wait: bool = False,
        timeout: float = 600.0,
    ) -> str:
        """Send ``text`` to an agent or pane; with ``wait``, return its response."""
        cap = Capability(capability.lower())
        mail = self.m.send(text, to=to, capability=cap)
        await asyncio.to_thread(self.m.ensure_delivery, self.config_path)
        if not wait:
            return _dump({"id": mail.id, "state": mail.state.value, "to": mail.recipient})
        done = await self.m.wait_final(mail.id, timeout)
        return _dump(
            {"id": done.id, "state": done.state.value, "response": self.m.response_text(done)}
        )

    def read_inbox(self, agent: str | None = None) -> str:
        """The inbox of ``agent`` (default: the caller) with each request's text."""
        who = agent or self.m.identity().agent
        out = []
        for mail in self.m.mailbox.inbox(who):
            item = mail.to_json()
            if mail.recipient == who and mail.kind is MailKind.REQUEST:
                item["request"] = self.m.request_text(mail)
            if mail.response_path:
                item["response"] = self.m.response_text(mail)
            out.append(item)
        return _dump(out)

    def reply(self, text: str, message_id: str | None = None) -> str:
        """Answer a request (default: the caller's oldest delivered one)."""
        mail = self.m.reply(text, to=message_id)
        self.m.ensure_delivery(self.config_path)
        return _dump(
            {"id": mail.id, "state": mail.state.value, "response_path": mail.response_path}
        )

    def handoff(self, note: str, to: str = "planner", step: int | None = None) -> str:
        """Hand work over: ``planner`` queues a task; ``pipeline`` writes the handoff file."""
        note = self.m.redactor.redact(note)
        if to == "planner":
            from politerm.engine.loop import submit

            task = submit(self.m.store, self.m.config, note)
            return _dump({"task": task.id, "state": task.state.value})
        if to == "pipeline":
            layout = self.handoff_layout()
            path = self.cwd / (layout.step(step) if step is not None else layout.main)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            who = self.m.identity().agent
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(f"\n## Handoff from {who}\n\n{note.strip()}\n")
            return _dump({"file": str(path)})
        msg = f"handoff to {to!r}: choose 'planner' or 'pipeline'"
        raise ValueError(msg)

    def handoff_layout(self) -> Layout:
        """Where the pipeline's handoff files are: as the run's prompts name them.

        ``[pipeline] handoff_dir`` when set; else META's ``.meta/handoff.md`` when a run
        from a META repository wrote it here; else ``.handoff.md``.
        """
        from politerm.pipeline.handoff import CLASSIC, META_DIR, Layout, layout_for

        setting = self.m.config.pipeline.handoff_dir
        if setting is not None:
            return layout_for(None, setting)
        meta = Layout(META_DIR)
        return meta if (self.cwd / meta.main).is_file() else CLASSIC

    def report_status(self, status: str) -> str:
        """Record a one-line status of the caller (``poli status`` shows it)."""
        who = self.m.identity().agent
        event = self.m.store.add_event(
            "status", agent=None if who == USER else who, detail=self.m.redactor.redact(status)
        )
        return _dump({"event": event.id})


def build_server(tools: Tools) -> MCPServer:
    """The MCP server exposing :class:`Tools`; errors become one-line tool errors."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=(
            "politerm messaging: talk to the other agents of this session. Send a message "
            "(optionally waiting for the answer), read your inbox, reply to a request."
        ),
    )

    def guard(exc: Exception) -> t.NoReturn:
        # Our errors are one line saying what is wrong: the agent sees exactly that line.
        if isinstance(exc, PolitermError | ValueError):
            raise ToolError(str(exc)) from None
        raise exc

    @server.tool(description="List the agents of this politerm session (name, pane, state).")
    async def list_agents() -> str:
        try:
            return await tools.list_agents()
        except Exception as exc:  # noqa: BLE001  # every failure becomes a tool error line
            guard(exc)

    @server.tool(
        description=(
            "Send a message to another agent (name or %pane). capability: readonly or "
            "writable. With wait=true, block until the response (bounded by timeout seconds)."
        )
    )
    async def send_message(
        to: str, text: str, capability: str = "writable", wait: bool = False, timeout: float = 600.0
    ) -> str:
        try:
            return await tools.send_message(to, text, capability, wait, timeout)
        except Exception as exc:  # noqa: BLE001
            guard(exc)

    @server.tool(description="Read an inbox (default: yours): requests, states, responses.")
    def read_inbox(agent: str | None = None) -> str:
        try:
            return tools.read_inbox(agent)
        except Exception as exc:  # noqa: BLE001
            guard(exc)

    @server.tool(description="Reply to a request you received (default: the oldest delivered).")
    def reply(text: str, message_id: str | None = None) -> str:
        try:
            return tools.reply(text, message_id)
        except Exception as exc:  # noqa: BLE001
            guard(exc)

    @server.tool(
        description=(
            "Hand work off: to='planner' queues a task for the Planner; to='pipeline' appends "
            "the note to the pipeline's handoff file (step=N for a parallel step)."
        )
    )
    def handoff(note: str, to: str = "planner", step: int | None = None) -> str:
        try:
            return tools.handoff(note, to, step)
        except Exception as exc:  # noqa: BLE001
            guard(exc)

    @server.tool(description="Report your status in one line; poli status shows it.")
    def report_status(status: str) -> str:
        try:
            return tools.report_status(status)
        except Exception as exc:  # noqa: BLE001
            guard(exc)

    return server


async def serve_stdio(config: Config, config_path: pathlib.Path | None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    from politerm.store import RunStore

    if config_path is None and os.environ.get(ENV_CONFIG):
        config_path = pathlib.Path(os.environ[ENV_CONFIG])
    with RunStore.for_config(config) as store:
        tools = Tools(Messenger(config, store), config_path)
        await build_server(tools).run_stdio_async()
