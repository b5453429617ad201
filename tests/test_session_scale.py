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
    assert server.socket_name is not None
    root = _project(tmp_path / "proj", server.socket_name)
    config = load_config(root, env={})
    store = RunStore.open(config.store.resolved_path())
    session = Session(config, store)
    try:
        await session.host.server.ensure_session("scale", cwd=root)
        client = await session.host.server.connect("scale")
        sent = _count_listings(client)
        # "resume" reuses the session made above, so the counting client is the one used.
        agents = await session.up(resume=True)
        assert sorted(agents) == sorted(NAMES)
        assert len(sent) == 1, sent
        attached = await session.attach()
        assert {n: p.pane_id for n, (_, p) in attached.items()} == {
            n: p.pane_id for n, (_, p) in agents.items()
        }
        assert len(sent) == 2, sent
        stopped = await session.down()
        assert sorted(stopped) == sorted(agents)
        assert len(sent) == 3, sent
    finally:
        await session.host.server.close()
        store.close()
