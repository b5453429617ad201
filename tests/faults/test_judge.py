"""The chaos judge on hand-written agent logs: each kind of failure is caught, and named."""

from __future__ import annotations

import typing as t

from politerm.testing.chaos import Claim, expected_report, judge
from politerm.testing.chaos.truth import fault_counts, submissions
from politerm.testing.fakeagent import EventLog

if t.TYPE_CHECKING:
    import pathlib

TASK = "TASK_ID={id}\nUser request:\nwork\nReply with id={id} (nonce=ab12)."
PLAN = "You received a PLANNER plan block:\n<PLAN>\nx\n</PLAN>\nTASK_ID={id}\n(nonce=cd34)"
RESULT = "EXECUTER replied:\n<RESULT>\nx\n</RESULT>\nTASK_ID={id}\n(nonce=ef56)"
NUDGE = "If finished, emit the tagged block now. TASK_ID={id} (nonce=ab12)."


class Log:
    """One agent's log, written as the fake agent writes it."""

    def __init__(self, path: pathlib.Path) -> None:
        self.log = EventLog(path)
        self.n = 0

    def start(self) -> Log:
        self.log.write("start", name="x")
        self.n = 0
        return self

    def prompt(self, template: str, tid: str, *, reply: bool = True, prefix: str = "") -> Log:
        self.n += 1
        self.log.prompt((prefix + template.format(id=tid)).encode(), self.n)
        if reply:
            self.log.write("reply", n=self.n, rule=0, seconds=0)
        return self

    def crash(self) -> Log:
        self.log.write("fault", kind="crash", at="after_submit", n=self.n)
        return self


def _judge(tmp_path: pathlib.Path, planner: Log, executer: Log, claims: dict[str, Claim]) -> t.Any:
    subs = submissions("PLANNER", tmp_path / "p.jsonl", ["draft"])
    subs += submissions("EXECUTER", tmp_path / "e.jsonl", ["draft"])
    return judge(subs, claims, expected_report=expected_report)


def _logs(tmp_path: pathlib.Path) -> tuple[Log, Log]:
    return Log(tmp_path / "p.jsonl").start(), Log(tmp_path / "e.jsonl").start()


def _done(tid: str) -> Claim:
    return Claim("DONE", expected_report(tid))


def test_clean_run_counts_three_handoffs_per_task(tmp_path: pathlib.Path) -> None:
    planner, executer = _logs(tmp_path)
    for tid in ("A", "B"):
        planner.prompt(TASK, tid)
        executer.prompt(PLAN, tid)
        planner.prompt(NUDGE, tid).prompt(RESULT, tid)
    verdict = _judge(tmp_path, planner, executer, {"A": _done("A"), "B": _done("B")})
    assert verdict.ok, verdict.summary()
    assert (verdict.tasks, verdict.handoffs, verdict.prompts, verdict.nudges) == (2, 6, 8, 2)


def test_unfinished_task_is_lost_naming_the_missing_handoff(tmp_path: pathlib.Path) -> None:
    planner, executer = _logs(tmp_path)
    planner.prompt(TASK, "A")
    executer.prompt(PLAN, "A", reply=False)
    verdict = _judge(tmp_path, planner, executer, {"A": Claim("FAILED", error="timed out\nx")})
    assert verdict.lost == [
        "A ended FAILED ('timed out'); never answered: plan → EXECUTER, result → PLANNER"
    ]
    assert not (verdict.duplicated or verdict.merged or verdict.false_done)


def test_done_without_the_chain_or_with_another_report_is_false_done(
    tmp_path: pathlib.Path,
) -> None:
    planner, executer = _logs(tmp_path)
    planner.prompt(TASK, "A").prompt(TASK, "B")
    executer.prompt(PLAN, "A").prompt(PLAN, "B")
    planner.prompt(RESULT, "A").prompt(RESULT, "B")
    claims = {"A": _done("A"), "B": Claim("DONE", expected_report("A")), "C": _done("C")}
    planner.prompt(TASK, "C")
    verdict = _judge(tmp_path, planner, executer, claims)
    assert len(verdict.false_done) == 2
    assert verdict.false_done[0].startswith("B DONE with report 'All done for A.'")
    assert verdict.false_done[1] == "C DONE but never answered: plan → EXECUTER, result → PLANNER"


def test_resend_after_an_unanswered_crash_is_no_duplicate(tmp_path: pathlib.Path) -> None:
    planner, executer = _logs(tmp_path)
    planner.prompt(TASK, "A")
    executer.prompt(PLAN, "A", reply=False).crash()
    executer.start().prompt(PLAN, "A")
    planner.prompt(RESULT, "A")
    verdict = _judge(tmp_path, planner, executer, {"A": _done("A")})
    assert verdict.ok, verdict.summary()


def test_resend_of_an_answered_or_live_prompt_is_a_duplicate(tmp_path: pathlib.Path) -> None:
    planner, executer = _logs(tmp_path)
    planner.prompt(TASK, "A").prompt(TASK, "A", reply=False)  # same life: twice
    executer.prompt(PLAN, "A").crash()
    executer.start().prompt(PLAN, "A")  # answered before the crash: twice
    planner.prompt(RESULT, "A")
    verdict = _judge(tmp_path, planner, executer, {"A": _done("A")})
    assert verdict.duplicated == [
        "plan of A to EXECUTER submitted again (life 1 prompt 1; before: life 0 prompt 1)",
        "task of A to PLANNER submitted again (life 0 prompt 2; before: life 0 prompt 1)",
    ]


def test_merged_and_stray_prompts_are_caught(tmp_path: pathlib.Path) -> None:
    planner, executer = _logs(tmp_path)
    planner.prompt(TASK, "A", prefix="draft ")  # pasted onto text left in the box
    planner.prompt(TASK + "\n" + TASK.replace("{id}", "B"), "A")  # two prompts as one
    planner.prompt(RESULT, "A", prefix="")
    executer.prompt(PLAN, "A")
    executer.prompt("You received a PLANNER plan block: draft", "A")  # stray text inside
    verdict = _judge(tmp_path, planner, executer, {"A": _done("A")})
    reasons = [m.split(" prompt ", 1)[1] for m in verdict.merged]
    assert [r.split(":", 1)[0] for r in reasons] == [
        "1 starts like no politerm prompt",
        "2 holds 2 TASK_IDs",
        "2 holds 0 TASK_IDs",
    ]
    assert verdict.lost == [] and not verdict.ok


def test_fault_counts_read_the_agents_own_events(tmp_path: pathlib.Path) -> None:
    log = EventLog(tmp_path / "a.jsonl")
    log.write("swallowed_enter", reason="fault")
    log.write("swallowed_enter", reason="burst")
    log.write("fault", kind="crash", at="mid_reply", n=1)
    log.write("fault", kind="slow", n=2, seconds=1.0)
    counts = fault_counts([tmp_path / "a.jsonl", tmp_path / "missing.jsonl"])
    assert counts == {"lost_enter": 1, "crash:mid_reply": 1, "slow": 1}
