"""The manager's engine on the file channel with a script playing the IDE agent, and a
scripted brain behind the real SDKs on the mock server: three dev turns to TASK_COMPLETE,
summarization, questions, bad replies, 429s, timeouts and a dev agent that never reports."""

from __future__ import annotations

import asyncio
import pathlib
import re
import shutil
import stat
import typing as t

import pytest

from politerm.errors import DevStepTimeout, ManagerError
from politerm.manager.states import ManagerState
from politerm.manager.store import ManagerStore
from politerm.store import RunStore
from politerm.testing.mockllm import MockLLM, Rule
from tests.manager_helpers import THREE_STEPS, Rig, ide

S = ManagerState
BOUND = 90.0


async def bounded(coro: t.Awaitable[t.Any]) -> t.Any:
    async with asyncio.timeout(BOUND):
        return await coro


@pytest.mark.parametrize("mode", ["end-marker", "quiet-file"])
async def test_goal_reaches_task_complete_through_three_dev_turns_on_the_file_channel(
    tmp_path: pathlib.Path, mode: str
) -> None:
    with MockLLM(THREE_STEPS, sides=False) as llm:
        rig = Rig(tmp_path, llm)
        flags = ("--quiet",) if mode == "quiet-file" else ()
        with ide(rig.root, *flags):
            project = await bounded(rig.goal("Make hello.py print hi, with a test"))
        prompts = rig.prompts()
        rig.close()
    assert project.state is S.TASK_COMPLETE, project.error
    assert project.result == "hello.py exists and its test passes"
    assert (project.step, project.brain_calls, project.turn_count) == (3, 4, 7)
    # the overview only on the first call; each later prompt shows the previous report
    assert "## Project overview" in prompts[0] and "README.md (first 2 lines)" in prompts[0]
    assert all("## Project overview" not in p for p in prompts[1:])
    assert "A tiny hello project" in prompts[0] and "Make hello.py print hi" in prompts[0]
    # each report whole (it is written in two parts): never taken half-written
    planned = ["Create hello.py printing hi", "Add a test for hello.py", "Run the tests"]
    for step, first in enumerate(planned, start=1):
        report = f"Report for step {step}: {first}\nAll good."
        assert f"## Latest dev report\n{report}\n\nDecide" in prompts[step]
    # reports are moved to processed/, timestamped with their step; instructions atomic
    processed = sorted(p.name for p in (rig.root / "dev_logs" / "processed").iterdir())
    task = project.task_id
    assert [n.rsplit("_", 1)[1] for n in processed] == [f"{task}-s{i}.txt" for i in (1, 2, 3)]
    stamped = re.compile(rf"cursor_step_output_\d{{8}}T\d{{6}}_{task}-s\d\.txt")
    assert all(stamped.fullmatch(n) for n in processed), processed
    assert not (rig.root / "dev_logs" / "cursor_step_output.txt").exists()
    instruction = rig.root / "dev_instructions" / "next_step.txt"
    assert instruction.read_text().startswith(f"# Step 3 of task {task}\n\nRun the tests\n")
    assert stat.S_IMODE(instruction.stat().st_mode) == 0o600
    assert not list(instruction.parent.glob(".*tmp"))


async def test_a_second_task_never_takes_the_first_tasks_reports(tmp_path: pathlib.Path) -> None:
    with MockLLM(THREE_STEPS, sides=False) as llm:
        rig = Rig(tmp_path, llm)
        with ide(rig.root):
            first = await bounded(rig.goal("Make hello.py print hi"))
            second = await bounded(rig.goal("Make hello.py print hi again"))
        prompts = rig.prompts()
        rig.close()
    assert first.state is second.state is S.TASK_COMPLETE, second.error
    assert first.task_id != second.task_id and second.step == 3
    processed = sorted(p.name for p in (rig.root / "dev_logs" / "processed").iterdir())
    assert len(processed) == 6
    assert sum(n.endswith(f"{second.task_id}-s1.txt") for n in processed) == 1
    # the second task was planned from its own reports: 4 calls each, overview in both firsts
    assert len(prompts) == 8
    assert "## Project overview" in prompts[4]
    assert "Task 'Make hello.py print hi' completed" in prompts[4]


async def test_a_report_moved_before_a_crash_is_found_again(tmp_path: pathlib.Path) -> None:
    from politerm.manager.channels import FileChannel

    processed = tmp_path / "dev_logs" / "processed"
    processed.mkdir(parents=True)
    (processed / "cursor_step_output_20260101T000000_T1-s2.txt").write_text(
        "Step 2 done\nEND_OF_REPORT\n"
    )
    channel = FileChannel(tmp_path, stable_seconds=0.5)
    assert await bounded(channel.report("T1", 2, 5.0)) == "Step 2 done"
    with pytest.raises(DevStepTimeout, match=r"no report from the dev agent for step 2 within 1s"):
        await bounded(channel.report("T2", 2, 1.0))  # another task's step 2 is not it


async def test_a_project_whose_directory_is_gone_is_the_project_error_state(
    tmp_path: pathlib.Path,
) -> None:
    with MockLLM([Rule(".*", "TASK_COMPLETE nothing to do")], sides=False) as llm:
        rig = Rig(tmp_path, llm)
        shutil.rmtree(rig.root)
        with pytest.raises(ManagerError, match=r"project 'proj': .*proj is not a directory"):
            rig.manager.start("proj", "Anything")
        failed = rig.store.project("proj")
        asked = len(llm.requests())
        rig.root.mkdir()  # back again: the project loads and the task runs
        project = await bounded(rig.goal("Anything"))
        moves = [
            (e.data["from"], e.data["to"])
            for e in rig.run_store.list_events(limit=500)
            if e.kind == "manager.state"
        ]
        rig.close()
    assert failed.state is S.ERROR_PROJECT and asked == 0
    assert moves[:4] == [
        ("idle", "loading_project"), ("loading_project", "error_project"),
        ("error_project", "loading_project"), ("loading_project", "project_selected"),
    ]  # fmt: skip
    assert project.state is S.TASK_COMPLETE


async def test_history_and_events_are_recorded_per_step(tmp_path: pathlib.Path) -> None:
    with MockLLM(THREE_STEPS, sides=False) as llm:
        rig = Rig(tmp_path, llm)
        with ide(rig.root):
            await bounded(rig.goal("Make hello.py print hi"))
        turns = rig.store.turns("proj")
        events = [e for e in rig.run_store.list_events(limit=500) if e.kind == "manager.state"]
        rig.close()
    assert [(t.role, t.step) for t in turns] == [
        ("manager", 1), ("dev", 1), ("manager", 2), ("dev", 2), ("manager", 3), ("dev", 3),
        ("manager", 3),
    ]  # fmt: skip
    assert turns[1].text.startswith("Report for step 1: Create hello.py printing hi")
    assert "END_OF_REPORT" not in turns[1].text
    assert turns[-1].text == "TASK_COMPLETE hello.py exists and its test passes"
    moves = [e.data["to"] for e in events]
    assert moves[:3] == ["loading_project", "project_selected", "calling_brain"]
    assert moves.count("waiting_dev_report") == 3 and moves.count("processing_report") == 3
    assert moves[-1] == "task_complete"
    assert all(e.task_id == turns[0].task_id for e in events[2:])


@pytest.mark.parametrize("budget", ["turn-count", "token-budget"])
async def test_summarization_after_n_turns_feeds_the_next_prompt(
    tmp_path: pathlib.Path, budget: str
) -> None:
    limits: dict[str, t.Any]
    if budget == "turn-count":
        limits, pad = {"summarize_after_turns": 3}, "0"
    else:  # many turns allowed, but one long report (~150 tokens) passes 100 tokens
        limits, pad = {"summarize_after_turns": 100, "summarize_tokens": 100}, "600"
    with MockLLM(THREE_STEPS, sides=False) as llm:
        rig = Rig(tmp_path, llm, keep_recent_turns=1, **limits)
        with ide(rig.root, "--pad", pad):
            project = await bounded(rig.goal("Make hello.py print hi"))
        prompts = rig.prompts()
        rig.close()
    # the summary, its counter and the folded turns are in the store, for the next process
    with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
        again = ManagerStore(store)
        project = again.project("proj")
        turns = again.turns("proj")
    assert project.state is S.TASK_COMPLETE, project.error
    summary_calls = [i for i, p in enumerate(prompts) if p.startswith("## Earlier summary")]
    assert summary_calls, prompts
    first = summary_calls[0]
    # the turns folded in were the older ones; the next planning prompt carries the summary
    assert "Create hello.py printing hi" in prompts[first]
    assert "SUMMARY-XYZ: hello.py created and tested" in prompts[first + 1]
    assert "## Context summary\nSUMMARY-XYZ" in prompts[first + 1]
    assert "[Manager → Dev, step 1]" not in prompts[first + 1]
    assert project.summaries == len(summary_calls) and project.turn_count == 7
    assert project.summary.startswith("SUMMARY-XYZ")
    assert "Task 'Make hello.py print hi' completed" in project.summary
    assert any(t.summarized for t in turns) and not turns[-1].summarized


async def test_question_pauses_and_input_resumes(tmp_path: pathlib.Path) -> None:
    rules = [
        Rule(r"\[Human, step 0\]\n8080", "TASK_COMPLETE the port is 8080"),
        Rule(r".*", "NEED_USER_INPUT: Which port should the server use?"),
    ]
    with MockLLM(rules, sides=False) as llm:
        rig = Rig(tmp_path, llm)
        project = await bounded(rig.goal("Start a server"))
        assert project.state is S.PAUSED_WAITING_USER_INPUT
        assert project.question == "Which port should the server use?"
        assert project.resumable
        rig.manager.answer("proj", "8080")
        project = await bounded(rig.manager.run("proj"))
        rig.close()
    assert project.state is S.TASK_COMPLETE
    assert project.result == "the port is 8080" and project.question is None


async def test_a_bad_reply_is_retried_once(tmp_path: pathlib.Path) -> None:
    rules = [
        Rule(r".*", "   ", times=1),
        Rule(r".*", "TASK_COMPLETE nothing to do"),
    ]
    with MockLLM(rules, sides=False) as llm:
        rig = Rig(tmp_path, llm)
        project = await bounded(rig.goal("Nothing"))
        bad = [e for e in rig.run_store.list_events() if e.kind == "manager.bad_reply"]
        rig.close()
    assert project.state is S.TASK_COMPLETE and project.brain_calls == 2
    assert len(bad) == 1 and "empty" in bad[0].detail


@pytest.mark.parametrize(
    ("rule", "shown"),
    [
        (Rule(".*", "NEED_USER_INPUT:"), "NEED_USER_INPUT:"),
        (Rule(".*", "\x1b[2J\x1b[H"), "(empty)"),
        (Rule(".*", raw="<html>garbage</html>"), "could not be read"),
    ],
    ids=["marker-without-text", "only-escapes", "garbage-body"],
)
async def test_a_reply_bad_twice_is_an_error_state_showing_it(
    tmp_path: pathlib.Path, rule: Rule, shown: str
) -> None:
    with MockLLM([rule], sides=False) as llm:
        rig = Rig(tmp_path, llm)
        project = await bounded(rig.goal("Anything"))
        rig.close()
    assert project.state is S.ERROR_BRAIN_REPLY
    assert project.brain_calls == 2 and len(llm.requests()) == 2
    assert project.error is not None and shown in project.error
    assert project.task_status == "failed"


async def test_429s_are_retried_and_the_task_goes_on(tmp_path: pathlib.Path) -> None:
    rules = [Rule(".*", status=429, times=2), Rule(".*", "TASK_COMPLETE done")]
    with MockLLM(rules, sides=False) as llm:
        rig = Rig(tmp_path, llm, provider="anthropic")
        project = await bounded(rig.goal("Anything"))
        rig.close()
    assert project.state is S.TASK_COMPLETE and len(llm.requests()) == 3


async def test_brain_timeouts_end_in_the_brain_error_state(tmp_path: pathlib.Path) -> None:
    with MockLLM([Rule(".*", "late", delay=5)], sides=False) as llm:
        rig = Rig(tmp_path, llm, provider="openai", brain={"call_timeout": 0.3, "max_retries": 1})
        project = await bounded(rig.goal("Anything"))
        rig.close()
    assert project.state is S.ERROR_BRAIN
    assert project.error is not None and "no answer within 0.3s (2 attempts)" in project.error


async def test_no_dev_report_is_a_system_error_turn_and_the_brain_replans(
    tmp_path: pathlib.Path,
) -> None:
    rules = [
        Rule(r"SYSTEM_ERROR: no report from the dev agent for step 1", "Try it again"),
        Rule(r"## Latest dev report\nReport for step 2", "TASK_COMPLETE done on the retry"),
        Rule(r".*", "Create hello.py"),
    ]
    with MockLLM(rules, sides=False) as llm:
        rig = Rig(tmp_path, llm, step_timeout=2.0)
        with ide(rig.root, "--skip", "1"):
            project = await bounded(rig.goal("Make hello.py"))
        timeouts = [e for e in rig.run_store.list_events() if e.kind == "manager.dev_timeout"]
        turns = rig.store.turns("proj")
        rig.close()
    assert project.state is S.TASK_COMPLETE, project.error
    assert len(timeouts) == 1 and "step 1 within 2s" in timeouts[0].detail
    assert turns[1].role == "system" and turns[1].text.startswith("SYSTEM_ERROR: no report")


async def test_interrupt_pauses_the_task_for_guidance(tmp_path: pathlib.Path) -> None:
    with MockLLM([Rule(".*", "Create hello.py")], sides=False) as llm:
        rig = Rig(tmp_path, llm)
        task = asyncio.create_task(rig.goal("Make hello.py"))  # no IDE: waits for a report
        await bounded(_until(lambda: rig.store.project("proj").state is S.WAITING_DEV_REPORT))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rig.store.project("proj").state is S.WAITING_DEV_REPORT  # like a crash
        project = await rig.manager.interrupt("proj")
        rig.close()
    assert project.state is S.PAUSED_WAITING_USER_INPUT
    assert project.question is not None and "interrupted" in project.question


async def _until(check: t.Callable[[], bool]) -> None:
    from politerm.testing.retry import aretry_until

    async def look() -> bool:
        return check()

    await aretry_until(look, BOUND, what="the manager's state")
