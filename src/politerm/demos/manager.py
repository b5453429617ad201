"""``poli demo manager``: a goal planned step by step by a fake brain agent, done by a fake dev."""

from __future__ import annotations

import asyncio
import json
import sys

from politerm.agents.bundled import FAKE_AGENT_MODULE
from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.manager.app import build_manager
from politerm.manager.pane import close_sessions, session_name
from politerm.manager.states import ManagerState

GOAL = "Make hello.py with a test"


def _fake(scenario: str) -> list[str]:
    return [sys.executable, "-m", FAKE_AGENT_MODULE, "--mode", "claude", "--scenario", scenario]


async def run(*, say: Say, keep: bool = False) -> Outcome:
    """Give the manager a goal and run it to TASK_COMPLETE.

    Its brain is a fake agent in a pane (``[manager.brain] provider = "agent"``: no model,
    no SDK, no key) that plans three steps, one per dev report it reads; the fake dev
    agent does each in a pane of the demo's tmux server.
    """
    scratch = Scratch.make("manager")
    (scratch.root / "proj").mkdir(mode=0o700)
    scratch.write_config(
        '[manager]\ndev_agent = "fake-claude"\nstep_timeout = 60\n'
        f"dev_command = {json.dumps(_fake('manager-dev'))}\n\n"
        '[manager.brain]\nprovider = "agent"\nagent = "fake-claude"\ncall_timeout = 60\n'
        f"command = {json.dumps(_fake('manager-brain'))}\n"
    )
    try:
        config = load_config(scratch.root, env={})
        manager = build_manager(config, on_event=lambda _p, line: say(line))
        mstore = manager.store
        try:
            mstore.add_project("demo", scratch.root / "proj", goal=GOAL, channel="pane")
            manager.start("demo", GOAL)
            try:
                async with asyncio.timeout(120):
                    project = await manager.run("demo")
            finally:
                await manager.aclose()
                # Only the dev agent's session is kept: `poli down` then ends the server.
                await close_sessions(config, ["brain"] if keep else None)
            turns = [tt for tt in mstore.turns("demo") if tt.role == "dev"]
        finally:
            mstore.store.close()
        if keep:
            # Point the kept project's poli.toml at the dev agent's own session.
            scratch.session = session_name(config, "demo")
            scratch.write_config()
        summary = [
            f"task {project.task_id}: {project.state.value} after {project.step} steps"
            + (f": {project.result}" if project.result else ""),
            *(f"  dev report {n}: {tt.text.splitlines()[1]}" for n, tt in enumerate(turns, 1)),
        ]
        ok = project.state is ManagerState.TASK_COMPLETE and len(turns) == 3
        return Outcome(ok, summary, scratch.keep_lines() if keep else [])
    finally:
        if not keep:
            await scratch.remove()
