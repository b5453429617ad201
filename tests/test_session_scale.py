"""A session of many agents costs the tmux server one listing, not one per agent."""

from __future__ import annotations

import json
import sys
import typing as t

from politerm.config import load_config
from politerm.engine.session import Session
from politerm.store import RunStore
from politerm.tmux import agent_panes, find_agent_pane, new_window

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.tmux import ControlClient, TmuxServer

NAMES = ["PLANNER", "EXECUTER", *(f"IDLE{i}" for i in range(4))]


def _project(root: pathlib.Path, socket: str) -> pathlib.Path:
    root.mkdir(parents=True)
    argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
    agents = "".join(
        f'[agents.{name}]\ncommand = {json.dumps(argv)}\nprofile = "fake-plain"\n'
        f'cwd = "."\nprimer = false\n\n'
        for name in NAMES
    )
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\nsession = "scale"\n\n'
        f'[store]\npath = "runs.sqlite3"\n\n[timeouts]\nready = 30\n\n{agents}'
    )
    return root


def _session(server: libtmux.Server, tmp_path: pathlib.Path) -> tuple[Session, RunStore]:
    """A session (not up) of :data:`NAMES` on ``server``, and its open store."""
    assert server.socket_name is not None
    config = load_config(_project(tmp_path / "proj", server.socket_name), env={})
    store = RunStore.open(config.store.resolved_path())
    return Session(config, store), store


def _count_listings(client: ControlClient) -> list[str]:
    """Record every ``list-panes`` the client sends from now on (the command still runs)."""
    sent: list[str] = []
    real = client.cmd

    async def cmd(*args: str, timeout: float = 10.0) -> list[str]:
        if args and args[0] == "list-panes":
            sent.append(" ".join(args))
        return await real(*args, timeout=timeout)

    client.cmd = cmd  # type: ignore[method-assign]
    return sent


async def test_agent_panes_names_every_agent_pane_once(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    sh = ["sh", "-c", "sleep 600"]
    a = await new_window(tmux_session, tmux_server, session="t", name="a", argv=sh, agent="A")
    b = await new_window(tmux_session, tmux_server, session="t", name="b", argv=sh, agent="B")
    await new_window(tmux_session, tmux_server, session="t", name="plain", argv=sh)
    found = await agent_panes(tmux_session, tmux_server)
    assert {name: p.pane_id for name, p in found.items()} == {"A": a.pane_id, "B": b.pane_id}
    only_b = await find_agent_pane(tmux_session, tmux_server, "B")
    assert only_b is not None and only_b.pane_id == b.pane_id
    assert await find_agent_pane(tmux_session, tmux_server, "C") is None


async def test_up_attach_and_down_list_the_panes_once_for_all_agents(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    session, store = _session(server, tmp_path)
    try:
        await session.host.server.ensure_session("scale", cwd=tmp_path / "proj")
        client = await session.host.server.connect("scale")
        sent = _count_listings(client)
        # "resume" reuses the session made above, so the counting client is the one used.
        agents = await session.up(resume=True)
        assert sorted(agents) == sorted(NAMES)
        assert len(sent) == 1, sent
        attached = await session.attach()
        assert {n: d.terminal_name for n, d in attached.items()} == {
            n: d.terminal_name for n, d in agents.items()
        }
        assert len(sent) == 2, sent
        stopped = await session.down()
        assert sorted(stopped) == sorted(agents)
        assert len(sent) == 3, sent
    finally:
        await session.host.server.close()
        store.close()


class _Commits:
    """Durable and undurable commits of a store's connection, from its SQL trace."""

    def __init__(self, store: RunStore) -> None:
        self.durable = self.undurable = 0
        self._normal = False
        store._conn.set_trace_callback(self._seen)  # counting, not changing

    def _seen(self, statement: str) -> None:
        if statement.startswith("PRAGMA synchronous"):
            self._normal = statement.endswith("NORMAL")
        elif statement == "COMMIT":
            if self._normal:
                self.undurable += 1
            else:
                self.durable += 1


async def test_up_syncs_the_store_once_for_all_agents_not_once_per_agent(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # Each agent's row and its READY state were a commit with an fsync of their own:
    # 1,000 fsyncs (about 3 s of waiting here) at 500 agents.
    session, store = _session(server, tmp_path)
    try:
        commits = _Commits(store)
        agents = await session.up()
        assert sorted(agents) == sorted(NAMES)
        assert commits.undurable >= 2 * len(NAMES)  # a row and a READY state each
        assert commits.durable < len(NAMES), commits.durable
        assert not store._unsynced  # and the store synced once after them
        assert {a.name: a.state for a in store.list_agents()} == dict.fromkeys(NAMES, "ready")
        await session.down()
    finally:
        await session.host.server.close()
        store.close()
