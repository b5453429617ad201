"""A commit from another process wakes only the agent loops it gives something to do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import typing as t

import pytest

from politerm.agents import load_profile
from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.driver import AgentDriver
from politerm.engine import router as router_module
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.store import RunStore
from politerm.testing.retry import aretry_until
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    import pathlib

    from politerm.tmux import ControlClient, TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]


def _note_from_another_process(path: pathlib.Path, agent: str) -> None:
    code = (
        "import sys, pathlib\n"
        "from politerm.store import RunStore\n"
        "with RunStore.open(pathlib.Path(sys.argv[1])) as s:\n"
        "    s.add_event('approval-answer', agent=sys.argv[2], detail='user: approve')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path), agent], check=True, timeout=60)


async def test_a_foreign_commit_wakes_only_the_agent_it_names(
    tmux_session: ControlClient,
    tmux_server: TmuxServer,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An idle loop also wakes on its backstop bound; on a slow machine that bound can fall
    # inside the window below and count as a wake for nothing. Lift it out of the test's way.
    monkeypatch.setattr(router_module, "IDLE_BACKSTOP", 3600.0)
    panes = [
        await new_window(tmux_session, tmux_server, session="t", name=f"A{i}", argv=FAKE)
        for i in range(4)
    ]
    profile = load_profile("fake-plain")
    store = RunStore.open(tmp_path / "runs.sqlite3")
    config = Config(
        tmux=TmuxConfig(socket=tmux_server.socket_name, session="t"),
        store=StoreConfig(path=store.path),
    )
    router = Router(
        Routing(
            config,
            store,
            {f"A{i}": AgentDriver(f"A{i}", profile, p, store=store) for i, p in enumerate(panes)},
        )
    )
    steps = dict.fromkeys(router.agents, 0)
    step = router._step

    async def counted(rt: AgentDriver) -> None:
        steps[rt.name] += 1
        await step(rt)

    router._step = counted  # type: ignore[method-assign,assignment]
    routing = asyncio.create_task(router.run())
    try:

        async def all_ready() -> bool:
            return all(rt.state.value == "ready" for rt in router.agents.values())

        await aretry_until(all_ready, 60, what="every fake agent to be ready")

        async def quiet() -> bool:
            before = dict(steps)
            await asyncio.sleep(0.3)
            return steps == before

        await aretry_until(quiet, 20, what="the agent loops to go idle")
        before = dict(steps)
        await asyncio.to_thread(_note_from_another_process, store.path, "A2")

        async def a2_woken() -> bool:
            return steps["A2"] > before["A2"]

        await aretry_until(a2_woken, 60, what="A2's loop to wake on the foreign commit")
        others = {name: n - before[name] for name, n in steps.items() if name != "A2"}
        assert others == {"A0": 0, "A1": 0, "A3": 0}, f"loops woken for nothing: {others}"
    finally:
        router.stop()
        await asyncio.wait_for(routing, 30)
        store.close()
