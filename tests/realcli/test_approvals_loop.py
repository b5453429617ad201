"""aider as the executer of the Planner⇄Executer loop, under each approval policy.

The router drives the real aider (pretty and ``--no-pretty``, diff edit format) as the
executer; its reply holds two shell commands with output and the result block, so four
questions come in a row ("Run shell command?", "Add command output to the chat?", twice).
The run's ``[routing] approval`` answers the commands: ``approve``, ``deny``, ``ask``
(answered through the run store as ``poli approve`` does), ``ask`` and ``deny`` with
patterns; each output question, a follow-up, gets the verdict of the command just run, so
the task never waits on it. The audit names each question, its command and the keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import typing as t

import pytest

from politerm.messaging.routing import run_task
from politerm.store.models import TaskState
from politerm.testing.mockllm import Rule
from tests.realcli.helpers import AgentSpec
from tests.realcli.test_approvals import (
    EXPECTED,
    FIRST,
    SECOND,
    answer_as_user,
    asked_of_user,
    check_decisions,
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
    "deny": '[routing]\napproval = "deny"\n\n',
    "ask": '[routing]\napproval = "ask"\n\n',
    "ask+patterns": '[routing]\napproval = "ask"\napproval_patterns = ["^echo first-out "]\n\n',
    "deny+patterns": (
        '[routing]\napproval = "deny"\napproval_patterns = ["^echo (first|second)-out "]\n\n'
    ),
}
assert set(ROUTING) == set(EXPECTED)


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
    user = asyncio.create_task(answer_as_user(r.store, r.agent("EXECUTER"), seen))
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
        user.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await user
    # Never stuck in waiting_approval on a follow-up question: the task ends DONE.
    assert task.state is TaskState.DONE, (task.error, events)
    assert seen == asked_of_user(mode), events
    check_decisions(r.store, mode, r.agent("EXECUTER").spec.workdir)
    # The planner (aider too) was never asked anything.
    planner = [e for e in r.store.list_events(limit=1000) if e.kind.startswith("approval")]
    assert all(e.agent == "EXECUTER" for e in planner), [(e.agent, e.detail) for e in planner]
