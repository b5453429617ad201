"""A session whose agents span several tmux servers (``[tmux] shard_size``), with real tmux.

Each test's first server is the libtmux plugin's private socket; with ``shard_size = 1`` the
loop's two agents run on two servers: PLANNER on it, EXECUTER on ``<socket>-t-1``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import typing as t

import psutil
import pytest

from politerm.cli.attach import agent_target
from politerm.driver.observer import Observer
from politerm.engine.loop import route, submit
from politerm.engine.service import _session_up
from politerm.errors import SessionNotFound
from politerm.messaging.routing import run_task
from politerm.store.models import TaskState
from politerm.testing.retry import aretry_until
from politerm.tmux.server import TmuxServer
from politerm.tmux.shards import shard_sockets
from tests.loophelpers import (
    FINAL,
    PLANNER_HEAD,
    block,
    open_loop,
    rule,
    started,
    write_project,
)

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

TASK = 60.0


@pytest.fixture
def socket(server: libtmux.Server) -> t.Iterator[str]:
    """The test's first server; every shard of it is killed after the test too."""
    assert server.socket_name is not None
    yield server.socket_name
    for name in shard_sockets(server.socket_name):
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, check=False)


def _sharded(root: pathlib.Path, socket: str, **kw: t.Any) -> pathlib.Path:
    path = write_project(root, socket, **kw)
    path.write_text(path.read_text().replace('session = "t"\n', 'session = "t"\nshard_size = 1\n'))
    return path


def _running(socket: str) -> bool:
    has = subprocess.run(["tmux", "-L", socket, "has-session"], capture_output=True, check=False)
    return has.returncode == 0


async def test_agents_spread_over_two_servers_hand_off_and_go_down_together(
    socket: str, tmp_path: pathlib.Path
) -> None:
    _sharded(tmp_path / "p", socket)
    async with started(tmp_path / "p") as loop:
        planner, executer = loop.store.get_agent("PLANNER"), loop.store.get_agent("EXECUTER")
        assert planner is not None and executer is not None
        assert (planner.socket, executer.socket) == (socket, f"{socket}-t-1")
        assert shard_sockets(socket) == [f"{socket}-t-1"]
        # The plan goes from the first server to the second, the result back.
        task = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert task.state is TaskState.DONE, task.error
        assert len(loop.prompts("PLANNER")) == 2 and len(loop.prompts("EXECUTER")) == 1
        # The views see both agents, each on its own server, and their states.
        async with Observer.of(loop.config) as observer:
            panes = {p.agent: p for p in await observer.panes() if p.agent}
            assert (panes["PLANNER"].socket, panes["EXECUTER"].socket) == ("", f"{socket}-t-1")
            states = await observer.states(loop.store.list_agents())
            assert states == {"PLANNER": "ready", "EXECUTER": "ready"}
        # The shard's session carries the project's tags, as the first one does.
        shard = TmuxServer(f"{socket}-t-1")
        _, out, _ = await shard.run("display-message", "-p", "-t", "=t:", "#{@poli_store}")
        assert out.strip() == str(loop.store.path)
        pids = [loop.pid("PLANNER"), loop.pid("EXECUTER")]
        stopped = await loop.session.down()
        assert sorted(stopped) == ["EXECUTER", "PLANNER"]
        assert not _running(socket) and not _running(f"{socket}-t-1")
        assert shard_sockets(socket) == []  # the socket files went with the servers
        assert not [p for p in pids if psutil.pid_exists(p)]


async def test_attach_finds_an_agent_on_the_second_server(
    server: libtmux.Server, socket: str, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "p"
    _sharded(root, socket)
    async with started(root) as loop:
        executer = loop.store.get_agent("EXECUTER")
        assert executer is not None
        args = await agent_target(loop.config, "executer")
        assert args[:2] == ["-L", f"{socket}-t-1"] and args[-1] == executer.pane_id
        with pytest.raises(SessionNotFound, match=r"no agent 'NOBODY'.*EXECUTER, PLANNER"):
            await agent_target(loop.config, "NOBODY")
        # A real terminal: `poli attach EXECUTER` in a window of another session.
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HOME": os.environ["HOME"]}
        server.new_session(
            "term",
            window_command=f"{sys.executable} -m politerm attach EXECUTER",
            start_directory=str(root),
            environment=env,
        )
        shard = TmuxServer(f"{socket}-t-1")

        async def attached() -> str:
            # Only terminals: politerm's own control-mode connections are clients too.
            fmt = "#{client_control_mode} #{session_name} #{pane_id}"
            _, out, _ = await shard.run("list-clients", "-F", fmt)
            return "\n".join(line[2:] for line in out.splitlines() if line.startswith("0 "))

        async def at_executer() -> bool:
            # A client is listed as it connects, before its select-window has run.
            return await attached() == f"t {executer.pane_id}"

        await aretry_until(at_executer, 30, what="a client on EXECUTER's pane, second server")
        assert await attached() == f"t {executer.pane_id}"
        # The first server's own session is untouched: the client is on the shard's.
        await shard.run("detach-client", "-a")
        await shard.run("detach-client")


async def test_a_dead_second_server_is_a_dead_host_for_its_agents_only(
    socket: str, tmp_path: pathlib.Path
) -> None:
    _sharded(tmp_path / "p", socket)
    async with started(tmp_path / "p") as loop:
        died = asyncio.Event()

        async def executer_died() -> bool:
            return any(
                e.kind == "agent-exited" and e.agent == "EXECUTER" for e in loop.store.list_events()
            )

        router = asyncio.create_task(route(loop.config, loop.store, until=died.is_set))
        # A task through the running router first: it drives both servers' agents.
        submit(loop.store, loop.config, "make hello", task_id="T-1")

        async def done() -> bool:
            task = loop.store.get_task("T-1")
            return task is not None and task.state is TaskState.DONE

        await aretry_until(done, TASK, what="T-1 done by the running router")
        await TmuxServer(f"{socket}-t-1").run("kill-server")
        await aretry_until(executer_died, 30, what="EXECUTER's death noticed")
        events = [e for e in loop.store.list_events() if e.kind == "agent-exited"]
        assert [e.agent for e in events] == ["EXECUTER"]
        assert "its tmux server is gone" in events[0].detail
        assert not router.done()  # PLANNER's server is up: routing goes on
        async with Observer.of(loop.config) as observer:
            states = await observer.states(loop.store.list_agents())
        assert states["EXECUTER"] == "exited" and states["PLANNER"] != "exited"
        died.set()
        # An idle router asks until() at a store commit (or its 30 s backstop).
        loop.store.add_event("note", detail="stop routing")
        await asyncio.wait_for(router, 30)


async def test_resume_after_a_reboot_brings_every_shard_back(
    socket: str, tmp_path: pathlib.Path
) -> None:
    _sharded(tmp_path / "p", socket)
    loop = open_loop(tmp_path / "p")
    try:
        await loop.session.up()
        first = [loop.pid("PLANNER"), loop.pid("EXECUTER")]
        # A reboot: every server and every agent process gone, the store kept.
        await loop.session.host.close()
        for name in (socket, f"{socket}-t-1"):
            await TmuxServer(name).run("kill-server")
        for pid in first:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                continue
        await loop.session.up(resume=True)
        assert loop.pid("PLANNER") not in first and loop.pid("EXECUTER") not in first
        planner, executer = loop.store.get_agent("PLANNER"), loop.store.get_agent("EXECUTER")
        assert planner is not None and executer is not None
        assert {planner.socket, executer.socket} == {socket, f"{socket}-t-1"}
        task = await run_task(loop.config, loop.store, "make hello", timeout=TASK)
        assert task.state is TaskState.DONE, task.error
    finally:
        await loop.session.down()
        await loop.session.host.close()
        loop.store.close()


# The planner copies the token from its task into its plan (the executer's prompt).
_PLAN_WITH_TOKEN = block("EXECUTER", "plan", "1. Push with token {token}.\n2. Report back.")
_PLANNER_COPIES = (
    PLANNER_HEAD
    + rule(r"\A\s*EXECUTER replied:", FINAL)
    + rule(r"\A(?=TASK_ID=)(?=.*?(?P<token>ghp_[A-Za-z0-9]{36}))", _PLAN_WITH_TOKEN)
)


async def test_a_secret_kept_by_another_process_reaches_an_agent_on_the_second_server(
    socket: str, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "p"
    path = _sharded(root, socket, planner=_PLANNER_COPIES)
    # EXECUTER listed first gets the first server; PLANNER, who reads the task, the second.
    text = path.read_text()
    planner = text[text.index("[agents.PLANNER]") : text.index("[agents.EXECUTER]")]
    path.write_text(text.replace(planner, "") + "\n" + planner)
    token = "ghp_" + secrets.token_hex(18)
    async with started(root) as loop:
        row = loop.store.get_agent("PLANNER")
        assert row is not None and row.socket == f"{socket}-t-1"
        # `poli task` in its own process: the store gets a marker, the session's first
        # server keeps the secret; the router here never saw it.
        argv = [sys.executable, "-m", "politerm", "task", f"push with {token}", "--id", "T-s"]
        proc = await asyncio.create_subprocess_exec(*argv, "--no-wait", cwd=root)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        task = loop.store.get_task("T-s")
        assert task is not None and token not in task.request
        done = asyncio.Event()

        async def finished() -> bool:
            current = loop.store.get_task("T-s")
            return current is not None and current.state is TaskState.DONE

        router = asyncio.create_task(route(loop.config, loop.store, until=done.is_set))
        await aretry_until(finished, TASK, what="T-s done")
        done.set()
        loop.store.add_event("note", detail="stop routing")
        await asyncio.wait_for(router, 30)
        # Both agents got the secret itself, read back from the first server's vault.
        assert token in loop.prompts("PLANNER")[0]
        assert token in loop.prompts("EXECUTER")[0]


async def test_the_service_outlives_the_first_server_while_another_holds_agents(
    socket: str, tmp_path: pathlib.Path
) -> None:
    _sharded(tmp_path / "p", socket)
    async with started(tmp_path / "p") as loop:
        await TmuxServer(socket).run("kill-server")
        assert not _running(socket) and _running(f"{socket}-t-1")
        # The project's router service keeps routing the agents still running.
        assert await asyncio.to_thread(_session_up, socket, "t")
        await loop.session.down()
        assert not await asyncio.to_thread(_session_up, socket, "t")
        assert shard_sockets(socket) == []
