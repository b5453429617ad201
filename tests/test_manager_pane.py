"""The pane channel on the bundled fake agent in a private tmux server: a goal reaching
TASK_COMPLETE through three dev turns, fenced reports per step id, a restarted manager that
finds the report already on the agent's screen, a dev agent that exits or is stuck, approvals,
timeouts, and the brain as an agent TUI."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import sys
import typing as t

from politerm.config import load_config
from politerm.driver import Expect, Host, TurnOutcome
from politerm.driver.turn import NUDGE_TEXT
from politerm.manager.engine import Manager
from politerm.manager.pane import STEP_RECORD, AgentBrain, PaneChannel, step_id
from politerm.manager.states import ManagerState
from politerm.manager.store import ManagerStore
from politerm.redact import Redactor
from politerm.store import RunStore
from politerm.testing.fakeagent import prompts
from politerm.testing.mockllm import MockLLM, Rule
from tests.manager_helpers import brain_settings

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.manager.store import Project
    from politerm.tmux import TmuxServer

S = ManagerState
BOUND = 120.0

DEV_SCENARIO = """
mode = "claude"
think_time = 0.2
strip_fences = false

[[rules]]
match = '(?s)^(?P<first>[^\\n]+)\\n.*STEP_ID=(?P<sid>\\S+)'
reply = '''
Done with it.

```poli:{sid}
status: success
commit_msg: Did: {first}
details: |
  Report for {first}
```
'''
"""

BRAIN_RULES = [
    Rule(r"## Latest dev report\n\(none yet\)", "Create hello.py"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Create hello.py", "Add a test"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Add a test", "Run the tests"),
    Rule(r"## Latest dev report\nstatus: success\nDid: Run the tests", "TASK_COMPLETE all done"),
]


def fake(tmp_path: pathlib.Path, name: str, scenario: str) -> list[str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(scenario)
    return [
        sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude",
        "--scenario", str(path), "--log", str(tmp_path / name),
    ]  # fmt: skip


def config_for(tmp_path: pathlib.Path, llm: MockLLM, **brain: t.Any) -> Config:
    config = load_config(tmp_path)
    settings = brain_settings(llm, **brain)
    manager = config.manager.model_copy(
        update={
            "brain": settings,
            "dev_agent": "fake-claude",
            "dev_command": fake(tmp_path, "dev", DEV_SCENARIO),
            "step_timeout": 60.0,
        }
    )
    return config.model_copy(update={"manager": manager})


class PaneRig:
    def __init__(self, tmp_path: pathlib.Path, llm: MockLLM, server: TmuxServer) -> None:
        self.tmp_path = tmp_path
        self.root = tmp_path / "proj"
        self.root.mkdir(exist_ok=True)
        self.config = config_for(tmp_path, llm)
        self.run_store = RunStore.open(tmp_path / "state" / "runs.sqlite3")
        self.store = ManagerStore(self.run_store, Redactor())
        self.server = server
        self.channels: list[PaneChannel] = []
        from politerm.manager.brain import GeminiBrain

        self.manager = Manager(
            self.store,
            self.config.manager,
            GeminiBrain(self.config.manager.brain, llm.token, Redactor()),
            self.channel,
        )
        if self.store.get_project("proj") is None:
            self.store.add_project("proj", self.root, goal="hello", channel="pane")

    def dev(self, scenario: str, **manager: t.Any) -> None:
        """Run the dev agent with ``scenario`` (and other ``[manager]`` values)."""
        command = fake(self.tmp_path, "dev", scenario)
        update = {"dev_command": command, **manager}
        self.config = self.config.model_copy(
            update={"manager": self.config.manager.model_copy(update=update)}
        )
        self.manager.config = self.config.manager

    def channel(self, project: Project) -> PaneChannel:
        ch = PaneChannel(
            self.config, project, self.run_store, host=Host(self.server, self.config.tmux.session)
        )
        self.channels.append(ch)
        return ch

    async def close(self) -> None:
        for ch in self.channels:
            await ch.kill()
        self.run_store.close()


async def test_goal_reaches_task_complete_through_three_dev_turns_on_the_fake_agent(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        try:
            rig.manager.start("proj", "Make hello.py with a test")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
            turns = rig.store.turns("proj")
        finally:
            await rig.close()
    assert project.state is S.TASK_COMPLETE, project.error
    assert project.result == "all done" and project.step == 3
    sent = [p.decode() for p in prompts(tmp_path / "dev")]
    assert [s.splitlines()[0] for s in sent] == ["Create hello.py", "Add a test", "Run the tests"]
    for step, text in enumerate(sent, start=1):
        assert f"STEP_ID={project.task_id}-s{step}" in text
    dev = [tt.text for tt in turns if tt.role == "dev"]
    assert dev[0] == "status: success\nDid: Create hello.py\n\nReport for Create hello.py"
    assert len(dev) == 3


async def test_a_restarted_manager_takes_the_report_already_on_screen(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        try:
            project = rig.manager.start("proj", "Make hello.py")
            tid = project.task_id or ""
            first = rig.channel(project)
            await first.send(tid, 1, "Create hello.py")
            async with asyncio.timeout(BOUND):
                report = await first.report(tid, 1, 60.0)
            # a new manager process: a new channel, the agent still in its pane
            again = rig.channel(project)
            async with asyncio.timeout(BOUND):
                assert await again.report(tid, 1, 60.0) == report
            assert (await again.driver()).terminal_name.startswith("%")  # a tmux pane
        finally:
            await rig.close()
    assert len(prompts(tmp_path / "dev")) == 1  # nothing typed twice


async def test_a_dev_agent_that_exits_is_the_dev_agent_error_state(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    exits = 'mode = "claude"\nthink_time = 0.1\n[[rules]]\nmatch = "STEP_ID"\naction = "exit"\n'
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(exits)
        try:
            rig.manager.start("proj", "Make hello.py")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
        finally:
            await rig.close()
    assert project.state is S.ERROR_DEV_AGENT
    assert project.error is not None and "DEV-proj" in project.error


async def test_a_stuck_dev_agent_is_the_dev_agent_error_state(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    stuck = (
        'mode = "claude"\nthink_time = 0.1\n[[rules]]\nmatch = "STEP_ID"\n'
        'reply = "  \u23bf  Credit balance is too low"\n'
    )
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(stuck)
        try:
            rig.manager.start("proj", "Make hello.py")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
            events = [e for e in rig.run_store.list_events() if e.kind == "stuck"]
        finally:
            await rig.close()
    assert project.state is S.ERROR_DEV_AGENT
    assert project.error is not None and "stuck" in project.error
    assert "Credit balance is too low" in project.error
    assert [e.agent for e in events] == ["DEV-proj"]


async def test_an_agent_tui_as_the_brain(tmp_path: pathlib.Path, tmux_server: TmuxServer) -> None:
    brain_scenario = """
mode = "claude"
think_time = 0.1
strip_fences = false

[[rules]]
match = '(?s)Latest dev report\\n\\(none yet\\).*STEP_ID=(?P<sid>\\S+)'
reply = '''
```poli:{sid}
status: success
commit_msg: reply
details: |
  Create hello.py
```
'''

[[rules]]
match = '(?s)Did: Create hello.py.*STEP_ID=(?P<sid>\\S+)'
reply = '''
```poli:{sid}
status: success
commit_msg: reply
details: |
  TASK_COMPLETE hello.py is there
```
'''
"""
    with MockLLM([], sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        settings = rig.config.manager.brain.model_copy(
            update={
                "provider": "agent",
                "agent": "fake-claude",
                "command": fake(tmp_path, "brain", brain_scenario),
                "call_timeout": 60.0,
            }
        )
        config = rig.config.model_copy(
            update={"manager": rig.config.manager.model_copy(update={"brain": settings})}
        )
        brain = AgentBrain(config, rig.run_store, host=Host(tmux_server, config.tmux.session))
        rig.manager.brain = brain
        try:
            rig.manager.start("proj", "Make hello.py")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
            brain_driver = await brain.driver()
            await brain_driver.kill()
        finally:
            await rig.close()
    assert project.state is S.TASK_COMPLETE, project.error
    assert project.result == "hello.py is there"
    asked = [p.decode() for p in prompts(tmp_path / "brain")]
    assert len(asked) == 2 and "## Project overview" in asked[0]
    assert llm.requests(side=None) == []


SLOW_DEV = """
mode = "claude"
think_time = 0.2
strip_fences = false

[[rules]]
match = '^If you are finished, emit the requested block'
recall = true
reply = '''
```poli:{sid}
status: success
commit_msg: Did: the step, reported on request
```
'''

[[rules]]
match = '(?s)^(?P<first>[^\\n]+)\\n.*STEP_ID=(?P<sid>\\S+)'
think_time = 4.0
reply = "Still thinking about {first}; no report yet."
"""


async def test_a_step_delivered_before_a_crash_is_not_typed_again(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(SLOW_DEV)
        try:
            project = rig.manager.start("proj", "Make hello.py")
            tid = project.task_id or ""
            first = rig.channel(project)
            await first.send(tid, 1, "Create hello.py")
            turn = asyncio.create_task(first.report(tid, 1, 60.0))

            async def delivered() -> bool:
                return any(r.delivered for r in rig.run_store.journal_open(record=STEP_RECORD))

            from politerm.testing.retry import aretry_until

            await aretry_until(delivered, BOUND, what="the step's delivery recorded")
            turn.cancel()  # the manager dies with the step in the agent's hands
            with contextlib.suppress(asyncio.CancelledError):
                await turn
            again = rig.channel(project)
            async with asyncio.timeout(BOUND):
                report = await again.report(tid, 1, 60.0)
            rows = rig.run_store.journal_of(STEP_RECORD, (step_id(tid, 1),))
        finally:
            await rig.close()
    assert report == "status: success\nDid: the step, reported on request"
    # one row: the step's, settled by the driver's recovery, its turn ended by the report
    assert [(r.attempt, r.state.value, r.outcome) for r in rows] == [(1, "ended", "answered")]
    sent = [p.decode() for p in prompts(tmp_path / "dev")]
    assert sent[0].startswith("Create hello.py\n")
    assert [s.startswith("Create hello.py") for s in sent].count(True) == 1
    # the driver's nudge asked for the report, with the step's own nonce
    assert sent[-1].startswith(NUDGE_TEXT) and f"(nonce {rows[0].nonce})" in sent[-1]


async def test_ctrl_c_interrupts_the_dev_agent_and_pauses_the_task(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    from politerm.testing.fakeagent.eventlog import read_log
    from politerm.testing.retry import aretry_until

    slow = 'mode = "claude"\nthink_time = 60\nstrip_fences = false\n'
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(slow)
        try:
            rig.manager.start("proj", "Make hello.py")
            turn = asyncio.create_task(rig.manager.run("proj"))

            async def delivered() -> bool:
                return any(r.delivered for r in rig.run_store.journal_open(record=STEP_RECORD))

            await aretry_until(delivered, BOUND, what="the step's delivery recorded")
            turn.cancel()  # what the console does on Ctrl-C, before it interrupts the step
            with contextlib.suppress(asyncio.CancelledError):
                await turn
            project = await rig.manager.interrupt("proj")

            async def interrupted() -> bool:
                return any(e["event"] == "interrupt" for e in read_log(tmp_path / "dev"))

            await aretry_until(interrupted, BOUND, what="the dev agent's interrupt logged")
        finally:
            await rig.close()
    assert project.state is S.PAUSED_WAITING_USER_INPUT and project.task_status == "paused"
    assert project.question is not None and "interrupted" in project.question


async def test_a_step_without_report_in_time_is_a_system_error_turn(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    slow = 'mode = "claude"\nthink_time = 30\nstrip_fences = false\n'
    rules = [
        Rule(r"SYSTEM_ERROR: no report from the dev agent for step 1", "TASK_COMPLETE gave up"),
        *BRAIN_RULES,
    ]
    with MockLLM(rules, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(slow, step_timeout=3.0)
        try:
            rig.manager.start("proj", "Make hello.py")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
            turns = rig.store.turns("proj")
            timeouts = [e for e in rig.run_store.list_events() if e.kind == "manager.dev_timeout"]
        finally:
            await rig.close()
    assert project.state is S.TASK_COMPLETE and project.result == "gave up"
    assert turns[1].role == "system"
    assert "no report from the dev agent for step 1" in turns[1].text
    assert "within 3s" in turns[1].text
    assert len(timeouts) == 1


APPROVING_DEV = """
mode = "claude"
think_time = 0.1
strip_fences = false

[[rules]]
match = '(?s)^(?P<first>[^\\n]+)\\n.*STEP_ID=(?P<sid>\\S+)'
approval = "Bash(echo hi > hello.txt)"
write_file = { path = "hello.txt", content = "hi\\n" }
reply = '''
```poli:{sid}
status: success
commit_msg: Did: {first}
```
'''
"""


async def test_the_dev_agents_approvals_follow_the_policy(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    rules = [
        Rule(r"Did: Create hello.py", "TASK_COMPLETE hello.txt written"),
        *BRAIN_RULES,
    ]
    with MockLLM(rules, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        rig.dev(APPROVING_DEV)
        routing = rig.config.routing.model_copy(update={"approval": "approve"})
        rig.config = rig.config.model_copy(update={"routing": routing})
        try:
            rig.manager.start("proj", "Write hello.txt")
            async with asyncio.timeout(BOUND):
                project = await rig.manager.run("proj")
            approvals = [e for e in rig.run_store.list_events() if e.kind == "approval"]
        finally:
            await rig.close()
    assert project.state is S.TASK_COMPLETE, project.error
    assert (rig.root / "hello.txt").read_text() == "hi\n"
    assert len(approvals) == 1 and approvals[0].agent == "DEV-proj"


async def test_killing_the_dev_agent_leaves_no_tmux_client_behind(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    """A channel on a server of its own (as ``poli demo manager`` runs it) closes it on kill."""
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        try:
            tmux = rig.config.tmux.model_copy(update={"socket": tmux_server.socket_name})
            config = rig.config.model_copy(update={"tmux": tmux})
            project = rig.manager.start("proj", "Make hello.py")
            before = asyncio.all_tasks()
            ch = PaneChannel(config, project, rig.run_store)
            async with asyncio.timeout(BOUND):
                assert (await ch.driver()).terminal_name.startswith("%")
                await ch.kill()
            # Its control clients' readers (and any reconnect after the server goes) are done.
            assert asyncio.all_tasks() - before == set()
        finally:
            await rig.close()


async def test_the_dev_agent_started_or_taken_back_has_the_projects_budget(
    tmp_path: pathlib.Path, tmux_server: TmuxServer
) -> None:
    """Its driver has the project's ``[budget]`` (and ``[limits]``) whichever way it came."""
    with MockLLM(BRAIN_RULES, sides=False) as llm:
        rig = PaneRig(tmp_path, llm, tmux_server)
        # The first reply (before the block) costs over 100 tokens; the block never comes.
        rig.dev("[[rules]]\nmatch = 'DO'\nreply = 'Thinking about it for a long while.'\n")
        command = [*rig.config.manager.dev_command, "--transcript", ".fake-transcript.jsonl"]
        manager = rig.config.manager.model_copy(update={"dev_command": command})
        budget = rig.config.budget.model_copy(update={"turn_tokens": 50})
        rig.config = rig.config.model_copy(update={"manager": manager, "budget": budget})
        try:
            project = rig.manager.start("proj", "Make hello.py")
            async with asyncio.timeout(BOUND):
                started = await rig.channel(project).driver()
                # A restarted manager's channel takes the running agent back.
                again = await rig.channel(project).driver()
                assert again.terminal_name == started.terminal_name
                result = await again.run_turn("DO T3", Expect.block("done"), timeout=60)
        finally:
            await rig.close()
    assert result.outcome is TurnOutcome.OVER_BUDGET, result
    assert "budget of 50 tokens" in result.error
