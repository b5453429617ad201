"""``poli demo manager``: a goal planned step by step by a brain, done by a fake dev agent."""

from __future__ import annotations

import asyncio
import json
import sys
import typing as t

from politerm.config import load_config
from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.manager.brain import API_BRAINS
from politerm.manager.engine import Manager
from politerm.manager.pane import PaneChannel, session_name
from politerm.manager.settings import BrainSettings
from politerm.manager.states import ManagerState
from politerm.redact import Redactor
from politerm.store import RunStore
from politerm.store.manager import ManagerStore
from politerm.testing.mockllm import MockLLM, Rule

if t.TYPE_CHECKING:
    from politerm.store.manager import Project

GOAL = "Make hello.py with a test"
#: The brain's script: each plan answers the latest dev report it is shown.
BRAIN = [
    Rule(r"## Latest dev report\n\(none yet\)", "Create hello.py"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Create hello.py", "Add a test"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Add a test", "Run the tests"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Run the tests", "TASK_COMPLETE all done"),
]


async def run(*, say: Say, keep: bool = False) -> Outcome:
    """Give the manager a goal and run it to TASK_COMPLETE.

    Its brain is the loopback mock model server (through the Gemini SDK), planning three
    steps that the fake dev agent does in a pane of the demo's tmux server.
    """
    scratch = Scratch.make("manager")
    (scratch.root / "proj").mkdir(mode=0o700)
    dev = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude"]
    dev += ["--scenario", "manager-dev"]
    scratch.write_config(
        '[manager]\ndev_agent = "fake-claude"\nstep_timeout = 60\n'
        f"dev_command = {json.dumps(dev)}\n"
    )
    channels: list[PaneChannel] = []
    try:
        with MockLLM(BRAIN, sides=False) as llm:
            config = load_config(scratch.root, env={})
            brain = BrainSettings(
                provider="gemini", base_url=llm.url, model="mock-model", call_timeout=30.0
            )
            manager_config = config.manager.model_copy(update={"brain": brain})
            config = config.model_copy(update={"manager": manager_config})
            with RunStore.open(config.store.resolved_path()) as store:
                mstore = ManagerStore(store, Redactor())

                def channel(project: Project) -> PaneChannel:
                    ch = PaneChannel(config, project, store)
                    channels.append(ch)
                    return ch

                manager = Manager(
                    mstore,
                    manager_config,
                    API_BRAINS["gemini"](brain, llm.token, Redactor()),
                    channel,
                    on_event=lambda _p, line: say(line),
                )
                mstore.add_project("demo", scratch.root / "proj", goal=GOAL, channel="pane")
                manager.start("demo", GOAL)
                async with asyncio.timeout(120):
                    project = await manager.run("demo")
                turns = [tt for tt in mstore.turns("demo") if tt.role == "dev"]
                for ch in channels:
                    await (ch.aclose() if keep else ch.kill())
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
