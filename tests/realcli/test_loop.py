"""The Planner⇄Executer loop with real CLIs in both seats, each task writing a file.

The mock model plays both agents: the planner answers the task with a plan block and the
executer's result with a final block; the executer runs a shell command with its own tool
(aider: a bash block it asks to run, approved by the run's policy) and sends a result block.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.messaging.routing import run_task
from politerm.store.models import MessageState, TaskState
from politerm.testing.mockllm import Rule
from tests.loophelpers import IDS
from tests.realcli.clis import API
from tests.realcli.helpers import REPLY, AgentSpec, written

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(420)]


def block(to: str, typ: str, tag: str, body: str) -> str:
    """A tagged block with the prompt's id and nonce, in a code block as the primer asks."""
    header = f'{{"to":"{to}","type":"{typ}","id":"{{id}}","nonce":"{{nonce}}"}}'
    return f"```\n[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n[[/POLI:MSG]]\n```\n"


def prompt(marker: str) -> str:
    """A rule pattern: ``marker`` anywhere in the prompt, plus its task id and nonce."""
    return f"(?=.*?{marker})" + IDS


PLAN = "Here is the plan.\n\n" + block(
    "EXECUTER", "plan", "PLAN", "1. Write loop-done into result.txt.\n2. Report back."
)
RESULT = "Finished.\n\n" + block("PLANNER", "result", "RESULT", "Wrote result.txt.")
FINAL = "All good.\n\n" + block("USER", "final", "REPORT", "Done: result.txt was written.")
COMMAND = "echo loop-done > result.txt"


def rules(executer: str) -> list[Rule]:
    """The script for one loop: task → plan, plan → tool call + result, result → final."""
    run = (
        # No tool protocol: the bash block and the result block come in one reply.
        Rule(prompt("You received a PLANNER plan block:"), RESULT, command=COMMAND)
        if executer == "aider"
        else Rule(prompt("You received a PLANNER plan block:"), "Running it.", command=COMMAND,
                  after=RESULT)
    )  # fmt: skip
    return [
        Rule(prompt("EXECUTER replied:"), FINAL, name="final"),
        run,
        Rule(prompt("User request:"), PLAN, name="plan"),
    ]


LOOPS = [
    pytest.param(("claude", None), ("codex", None), id="claude-codex"),
    pytest.param(("gemini", None), ("opencode", None), id="gemini-opencode"),
    pytest.param(("aider", "aider-raw"), ("aider", "aider-raw"), id="aider-aider"),
]


@pytest.mark.parametrize(("planner", "executer"), LOOPS)
async def test_loop_writes_a_file(
    planner: tuple[str, str | None],
    executer: tuple[str, str | None],
    rig: RigFactory,
    llm: MockLLM,
) -> None:
    llm.add(*rules(executer[0]))
    r = await rig(
        {
            "PLANNER": AgentSpec(planner[0], profile=planner[1]),
            "EXECUTER": AgentSpec(
                executer[0],
                profile=executer[1],
                args=("--edit-format", "diff") if executer[0] == "aider" else (),
            ),
        },
        extra='[routing]\napproval = "deny"\napproval_patterns = ["^echo loop-done "]\n\n',
    )
    events: list[str] = []
    task = await run_task(
        r.config,
        r.store,
        "Write loop-done into result.txt",
        printer=lambda e: events.append(f"{e.kind}: {e.detail}"),
        timeout=300,
    )
    assert task.state is TaskState.DONE, (task.error, events)
    # The agents' own hook receipts and their screens never disagreed.
    assert not [e for e in events if e.startswith("drift")], events
    assert task.report is not None and "result.txt was written" in task.report, task.report
    target = r.agent("EXECUTER").spec.workdir / "result.txt"
    await r.agent("EXECUTER").wait(written(target), "the executer to write result.txt", REPLY)
    assert target.read_text().strip() == "loop-done"
    states = {m.type: m.state for m in r.store.list_messages(task_id=task.id)}
    assert states == {
        "task": MessageState.ACKNOWLEDGED,
        "plan": MessageState.ACKNOWLEDGED,
        "result": MessageState.ACKNOWLEDGED,
    }, events
    answered = {req.rule for req in llm.requests()}
    assert {"final", "plan"} <= answered, answered
    apis = {req.api for req in llm.requests()}
    assert {API[planner[0]], API[executer[0]]} <= apis
