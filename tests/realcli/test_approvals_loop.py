"""aider as the executer of the Planner⇄Executer loop, under each approval policy.

The router drives the real aider (pretty and ``--no-pretty``, diff edit format) as the
executer; its reply holds two shell commands with output and the result block, so four
questions come in a row ("Run shell command?", "Add command output to the chat?", twice).
The run's ``[routing] approval`` answers them: ``approve``; ``deny`` with patterns over the
commands; ``ask``, answered through the run store as ``poli approve`` does. Each question is
answered as the one actually open, and the audit names it, its command and the keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import typing as t

import pytest

from politerm.engine.loop import run_task
from politerm.store.models import TaskState
from politerm.testing.mockllm import Rule
from tests.realcli.helpers import AgentSpec
from tests.realcli.test_approvals import (
    EXPECTED,
    FIRST,
    OUTPUT,
    RUN,
    SECOND,
    answer_as_user,
    approvals,
)
from tests.realcli.test_loop import FINAL, PLAN, block, prompt

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(420)]

RESULT = "Ran both.\n\n" + block("PLANNER", "result", "RESULT", "Wrote first.txt and second.txt.")
# aider has no tool protocol: the bash blocks and the result block come in one reply.
TWO = f"Running both.\n\n```bash\n{FIRST}\n```\n\n```bash\n{SECOND}\n```\n\n{RESULT}"
ROUTING = {
    "approve": '[routing]\napproval = "approve"\n\n',
    "pattern": (
        '[routing]\napproval = "deny"\napproval_patterns = ["^echo (first|second)-out "]\n\n'
    ),
    "ask": '[routing]\napproval = "ask"\n\n',
}


@pytest.mark.parametrize("mode", sorted(ROUTING))
@pytest.mark.parametrize("profile", ["aider", "aider-raw"])
async def test_aider_executer_in_the_loop_answers_each_open_question(
    profile: str, mode: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(
        Rule(prompt("EXECUTER replied:"), FINAL, name="final"),
        Rule(prompt("You received a PLANNER plan block:"), TWO, name="run"),
        Rule(prompt("User request:"), PLAN, name="plan"),
    )
    r = await rig(
        {
            "PLANNER": AgentSpec("aider", profile="aider-raw"),
            "EXECUTER": AgentSpec("aider", profile=profile, args=("--edit-format", "diff")),
        },
        extra=ROUTING[mode],
    )
    seen: list[tuple[str, str]] = []
    user = asyncio.create_task(answer_as_user(r.store, "EXECUTER", seen)) if mode == "ask" else None
    events: list[str] = []
    try:
        task = await run_task(
            r.config,
            r.store,
            "Write first.txt and second.txt",
            printer=lambda e: events.append(f"{e.kind}: {e.detail}"),
            timeout=300,
        )
    finally:
        if user is not None:
            user.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await user
    assert task.state is TaskState.DONE, (task.error, events)
    work = r.agent("EXECUTER").spec.workdir
    assert (work / "first.txt").read_text().strip() == "first-out"
    assert (work / "second.txt").read_text().strip() == "second-out"

    decisions = [d for d in approvals(r.store) if d.get("question") in (RUN, OUTPUT)]
    assert [d["question"] for d in decisions] == [RUN, OUTPUT, RUN, OUTPUT], events
    assert [d["command"] for d in decisions] == [FIRST, "", SECOND, ""], decisions
    assert [d["decision"] for d in decisions] == EXPECTED[mode], decisions
    keys = {"approve": ["y", "Enter"], "deny": ["n", "Enter"]}
    assert [d["keys"] for d in decisions] == [keys[d["decision"]] for d in decisions]
    assert all(d["by"] == ("user" if mode == "ask" else "policy") for d in decisions)
    if mode == "ask":
        assert seen == [(RUN, FIRST), (OUTPUT, ""), (RUN, SECOND), (OUTPUT, "")]
    # The planner (aider too) was never asked anything.
    planner = [e for e in r.store.list_events(limit=1000) if e.kind.startswith("approval")]
    assert all(e.agent == "EXECUTER" for e in planner), [(e.agent, e.detail) for e in planner]
