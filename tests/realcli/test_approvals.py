"""Approvals with the real CLIs, through the agent driver, in each CLI's default display.

aider (pretty and ``--no-pretty``, diff edit format) runs as an executer whose reply holds
two shell commands with output, so four questions come in a row: "Run shell command?",
"Add command output to the chat?", and the same again for the second command. Each command
is answered by the run's policy (approve, deny, ask, ask or deny plus patterns) or the user,
as the question actually open, never by the command of the question answered above it;
each output question, a follow-up, gets the verdict of the command just run. A command
with a blank line inside is read whole, so a pattern over its last part alone does not
approve it. Claude Code asks to run a 150-line heredoc whose box is taller than the screen,
and a 1500-line one whose box notes "Parser aborted"; a pattern over the whole command
approves each.
"""

from __future__ import annotations

import asyncio
import contextlib
import typing as t

import pytest

from politerm.agents.approval import (
    ApprovalPolicy,
    Decision,
    answer_pending,
    get_pending,
)
from politerm.agents.profile import load_profile
from politerm.canary.agentcheck import check_agent
from politerm.driver import AgentDriver
from politerm.driver.turn import Expect
from politerm.testing.mockllm import Rule
from politerm.testing.retry import aretry_until
from tests.realcli.clis import Options, prepare
from tests.realcli.helpers import REPLY, AgentSpec

if t.TYPE_CHECKING:
    import pathlib

    from politerm.store import RunStore
    from politerm.testing.mockllm import MockLLM
    from tests.realcli.conftest import RigFactory
    from tests.realcli.helpers import Agent, Rig
    from tests.realcli.install import Installed

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(420)]

RUN = "Run shell command? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]:"
OUTPUT = "Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:"
# Output, so aider asks to add it to the chat; the sleep keeps the command alive while
# aider's pexpect loop reads it (a command that exits at once loses its output there).
FIRST = "echo first-out | tee first.txt; sleep 1"
SECOND = "echo second-out | tee second.txt; sleep 1"
RESULT = (
    # The mock fills {nonce} from the rule's match (single braces are JSON).
    '[[POLI:MSG {"to":"PLANNER","type":"result","id":"T1","nonce":"{nonce}"}]]\n'
    "Ran both commands.\n"
    "[[/POLI:MSG]]\n"
)
TWO_COMMANDS = f"Running both.\n\n```bash\n{FIRST}\n```\n\n```bash\n{SECOND}\n```\n\n{RESULT}"
HEREDOC = "\n".join(
    ["cat > big.txt <<'EOF'", *(f"line {i} of the big file" for i in range(1, 151)), "EOF"]
)
HEREDOC_PATTERN = r"\Acat > big\.txt <<'EOF'\n(line \d+ of the big file\n)+EOF\Z"


def prompt(marker: str) -> t.Callable[[str], str]:
    return lambda nonce: f"Please run them. {marker} (nonce={nonce})"


def rule(marker: str, reply: str, **kw: t.Any) -> Rule:
    return Rule(rf"{marker} \(nonce=(?P<nonce>[0-9a-f]+)\)", reply, **kw)


def driver_for(r: Rig, agent: Agent, policy: ApprovalPolicy) -> AgentDriver:
    """The driver the router would use for this executer, on the rig's pane and store."""
    return AgentDriver(
        agent.name, agent.profile, agent.pane, store=r.store, policy=policy, cwd=agent.spec.workdir
    )


def approvals(store: RunStore, kind: str = "approval") -> list[dict[str, t.Any]]:
    return [e.data or {} for e in store.list_events(limit=1000) if e.kind == kind]


async def answer_as_user(
    store: RunStore, agent: Agent, seen: list[tuple[str, str]], decision: Decision | None = None
) -> None:
    """`poli approve` for every question asked: ``decision``, else run aider's commands and
    deny anything else.

    A question is told from the one before by when it was asked, not by its text: the
    same question asked again is answered again."""
    key = agent.name
    while True:
        pending = get_pending(store, key)
        if pending is not None and pending.answer is None:
            seen.append((pending.question, pending.command))
            ok = pending.question.startswith("Run shell command?")
            answer = decision or (Decision.APPROVE if ok else Decision.DENY)
            answer_pending(store, key, answer)

            async def answered(asked: float = pending.asked) -> bool:
                p = get_pending(store, key)
                return p is None or p.asked != asked

            await agent.wait(answered, f"{key} to take the answer")
        await asyncio.sleep(0.1)


AIDER_POLICIES = {
    "approve": ApprovalPolicy.of("approve"),
    "deny": ApprovalPolicy.of("deny"),
    "ask": ApprovalPolicy.of("ask"),
    # The first command by pattern, the second asked of the user.
    "ask+patterns": ApprovalPolicy.of("ask", [r"^echo first-out "]),
    "deny+patterns": ApprovalPolicy.of("deny", [r"^echo (first|second)-out "]),
}
A, D = "approve", "deny"
# What each question gets, and from whom: a command by the policy or the user, and the
# follow-up "Add command output to the chat?" the verdict of the command just run (aider
# asks it only after running one, and only when it printed something).
EXPECTED: dict[str, list[tuple[str, str, str, str]]] = {
    "approve": [(RUN, FIRST, A, "policy"), (OUTPUT, "", A, "follow-up"),
                (RUN, SECOND, A, "policy"), (OUTPUT, "", A, "follow-up")],
    "deny": [(RUN, FIRST, D, "policy"), (RUN, SECOND, D, "policy")],
    "ask": [(RUN, FIRST, A, "user"), (OUTPUT, "", A, "follow-up"),
            (RUN, SECOND, A, "user"), (OUTPUT, "", A, "follow-up")],
    "ask+patterns": [(RUN, FIRST, A, "policy"), (OUTPUT, "", A, "follow-up"),
                     (RUN, SECOND, A, "user"), (OUTPUT, "", A, "follow-up")],
    "deny+patterns": [(RUN, FIRST, A, "policy"), (OUTPUT, "", A, "follow-up"),
                      (RUN, SECOND, A, "policy"), (OUTPUT, "", A, "follow-up")],
}  # fmt: skip


def asked_of_user(mode: str) -> list[tuple[str, str]]:
    """The questions `poli approve` answers under ``mode``: only commands, never a follow-up."""
    return [(q, c) for q, c, _, by in EXPECTED[mode] if by == "user"]


def check_decisions(store: RunStore, mode: str, work: pathlib.Path) -> None:
    """Each question got the verdict ``EXPECTED`` names; the files say which commands ran."""
    decisions = [d for d in approvals(store) if d.get("question") in (RUN, OUTPUT)]
    got = [(d["question"], d["command"], d["decision"], d["by"]) for d in decisions]
    assert got == EXPECTED[mode], decisions
    keys = {"approve": ["y", "Enter"], "deny": ["n", "Enter"]}
    assert [d["keys"] for d in decisions] == [keys[d["decision"]] for d in decisions]
    ran = {c for _, c, d, _ in EXPECTED[mode] if c and d == A}
    assert (work / "first.txt").is_file() is (FIRST in ran)
    assert (work / "second.txt").is_file() is (SECOND in ran)
    if FIRST in ran:
        assert (work / "first.txt").read_text().strip() == "first-out"
    asked = [(d["question"], d["command"]) for d in approvals(store, "approval-asked")]
    assert asked == asked_of_user(mode), asked
    # The output questions never name a command in the audit line.
    details = [e.detail for e in store.list_events(limit=1000) if e.kind.startswith("approval")]
    assert not [d for d in details if "Add command output" in d and "asks to run" in d], details


@pytest.mark.parametrize("mode", sorted(AIDER_POLICIES))
@pytest.mark.parametrize("profile", ["aider", "aider-raw"])
async def test_aider_executer_two_commands_in_a_row(
    profile: str, mode: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(rule("APPROVALS-TWO", TWO_COMMANDS))
    r = await rig({"EXECUTER": AgentSpec("aider", profile=profile, args=("--edit-format", "diff"))})
    agent = r.agent("EXECUTER")
    driver = driver_for(r, agent, AIDER_POLICIES[mode])
    seen: list[tuple[str, str]] = []
    user = asyncio.create_task(answer_as_user(r.store, agent, seen))
    try:
        result = await driver.run_turn(prompt("APPROVALS-TWO"), Expect.block("result"), timeout=240)
    finally:
        user.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await user
    assert result.ok, (result.error, result.screen)
    assert result.block is not None and "Ran both commands." in result.block.body
    assert seen == asked_of_user(mode)
    check_decisions(r.store, mode, agent.spec.workdir)


# A command with a blank line inside (aider prints it padded, then "Run shell commands?"),
# then a second command. A pattern over the part below the blank line alone never
# approves it: the whole command is read, or it is not approved by pattern.
HEAD = "echo head-out | tee head.txt"
TAIL = "echo tail-out | tee tail.txt; sleep 1"
BLANK = f"{HEAD}\n\n{TAIL}"
BLANK_REPLY = f"Running both.\n\n```bash\n{BLANK}\n```\n\n```bash\n{SECOND}\n```\n\n{RESULT}"
RUNS = "Run shell commands? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]:"
TAIL_PATTERN = r"^echo tail-out "  # tried first: it matches only the part below the blank line
WHOLE_PATTERN = r"\Aecho head-out \| tee head\.txt\n\necho tail-out \| tee tail\.txt; sleep 1\Z"
SECOND_PATTERN = r"^echo second-out "


@pytest.mark.parametrize("patterns", ["whole", "tail"])
@pytest.mark.parametrize("profile", ["aider", "aider-raw"])
async def test_aider_command_with_a_blank_line_is_read_whole_for_patterns(
    profile: str, patterns: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(rule("APPROVALS-BLANK", BLANK_REPLY))
    r = await rig({"EXECUTER": AgentSpec("aider", profile=profile, args=("--edit-format", "diff"))})
    agent = r.agent("EXECUTER")
    allowed = [TAIL_PATTERN, *([WHOLE_PATTERN] if patterns == "whole" else []), SECOND_PATTERN]
    driver = driver_for(r, agent, ApprovalPolicy.of("deny", allowed))
    result = await driver.run_turn(prompt("APPROVALS-BLANK"), Expect.block("result"), timeout=240)
    assert result.ok, (result.error, result.screen)
    work = agent.spec.workdir
    ran = patterns == "whole"
    assert (work / "head.txt").is_file() is ran and (work / "tail.txt").is_file() is ran
    assert (work / "second.txt").read_text().strip() == "second-out"

    decisions = approvals(r.store)
    first, *rest = decisions
    assert (first["question"], first["command"], first["complete"]) == (RUNS, BLANK, True)
    if ran:
        assert first["decision"] == "approve", first
        assert first["reason"] == f"pattern {WHOLE_PATTERN!r} matches the command"
        assert [d["question"] for d in rest] == [OUTPUT, RUN, OUTPUT], decisions
        # Each output question follows a command approved just before it.
        assert [d["decision"] for d in rest] == ["approve", "approve", "approve"], decisions
    else:
        assert first["decision"] == "deny", first
        assert first["reason"] == f"policy 'deny': no approval pattern matches {BLANK!r}"
        assert [d["question"] for d in rest] == [RUN, OUTPUT], decisions
        assert [d["decision"] for d in rest] == ["approve", "approve"], decisions
    second = next(d for d in rest if d["question"] == RUN)
    assert (second["command"], second["reason"]) == (
        SECOND,
        f"pattern {SECOND_PATTERN!r} matches the command",
    )
    # Every command was read whole (a follow-up names none: never complete).
    assert all(d["complete"] is not d["follow_up"] for d in decisions), decisions


async def test_claude_approves_a_150_line_heredoc_by_pattern(rig: RigFactory, llm: MockLLM) -> None:
    llm.add(rule("APPROVALS-BIG", "Writing the file.", command=HEREDOC, after=RESULT))
    r = await rig({"EXECUTER": AgentSpec("claude")})
    agent = r.agent("EXECUTER")
    driver = driver_for(r, agent, ApprovalPolicy.of("deny", [HEREDOC_PATTERN]))
    result = await driver.run_turn(prompt("APPROVALS-BIG"), Expect.block("result"), timeout=240)
    assert result.ok, (result.error, result.screen)
    big = (agent.spec.workdir / "big.txt").read_text().splitlines()
    assert big == [f"line {i} of the big file" for i in range(1, 151)]
    (decision,) = approvals(r.store)
    assert decision["decision"] == "approve", decision
    assert decision["reason"] == f"pattern {HEREDOC_PATTERN!r} matches the command"
    assert decision["command"] == HEREDOC
    assert decision["tool"] == "Bash"
    assert decision["question"] == "Do you want to proceed?"
    assert decision["complete"] is True


# Over about a thousand lines, Claude Code notes " Parser aborted (timeout, resource limit,
# or over-length)" between the command and its question; the command is still read whole.
HUGE = "\n".join(
    ["cat > huge.txt <<'EOF'", *(f"line {i} of the huge file" for i in range(1, 1501)), "EOF"]
)
HUGE_PATTERN = r"\Acat > huge\.txt <<'EOF'\n(line \d+ of the huge file\n)+EOF\Z"


async def test_claude_reads_a_heredoc_whose_box_notes_parser_aborted(
    rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(rule("APPROVALS-HUGE", "Writing the file.", command=HUGE, after=RESULT))
    r = await rig({"EXECUTER": AgentSpec("claude")})
    agent = r.agent("EXECUTER")
    driver = driver_for(r, agent, ApprovalPolicy.of("ask", [HUGE_PATTERN]))
    result = await driver.run_turn(prompt("APPROVALS-HUGE"), Expect.block("result"), timeout=240)
    assert result.ok, (result.error, result.screen)
    assert len((agent.spec.workdir / "huge.txt").read_text().splitlines()) == 1500
    (decision,) = approvals(r.store)
    assert (decision["decision"], decision["by"]) == ("approve", "policy"), decision
    assert (decision["command"], decision["complete"]) == (HUGE, True)
    # Never asked of the user (the box is gone once answered; the note is in the recorded
    # tests/fixtures/screens/claude-parser-aborted-history.txt).
    assert not approvals(r.store, "approval-asked")


async def test_claude_long_command_shows_in_status_while_asked(
    rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(rule("APPROVALS-ASK", "Writing the file.", command=HEREDOC, after=RESULT))
    r = await rig({"EXECUTER": AgentSpec("claude")})
    agent = r.agent("EXECUTER")
    driver = driver_for(r, agent, ApprovalPolicy.of("ask"))
    turn = asyncio.create_task(
        driver.run_turn(prompt("APPROVALS-ASK"), Expect.block("result"), timeout=240)
    )

    async def asked() -> bool:
        return get_pending(r.store, "EXECUTER") is not None

    await aretry_until(asked, REPLY, interval=0.1, what="claude's question to be pending")
    pending = get_pending(r.store, "EXECUTER")
    assert pending is not None
    assert pending.command == HEREDOC
    assert pending.what == "Bash(cat > big.txt <<'EOF' … +151 lines)"
    answer_pending(r.store, "EXECUTER", Decision.APPROVE)
    result = await turn
    assert result.ok, (result.error, result.screen)
    assert len((agent.spec.workdir / "big.txt").read_text().splitlines()) == 150


async def test_agents_check_reads_claudes_tall_box_from_history(
    installed: Installed, llm: MockLLM, tmp_path: pathlib.Path
) -> None:
    # `poli agents check` looks through the driver: the approver reads the 150-line box
    # from the pane's history and the check names the whole command it denied.
    llm.add(rule("CHECK-TALL", "Writing the file.", command=HEREDOC, after="Not written."))
    spec = prepare("claude", installed.bins["claude"], llm, tmp_path / "home", tmp_path / "work")
    said: list[str] = []
    report = await check_agent(
        load_profile("claude"),
        argv=spec.argv,
        cwd=spec.workdir,
        env=spec.env,
        prompt="Please run it. CHECK-TALL (nonce=0)",
        ready_timeout=120,
        reply_timeout=240,
        say=said.append,
    )
    steps = {s.name: s for s in report.steps}
    assert "approval" in steps, said
    assert steps["approval"].ok
    assert steps["approval"].detail == (
        "denied Bash(cat > big.txt <<'EOF' … +151 lines) (read in full) with Escape "
        "(a check runs no tools)"
    ), said
    assert not (spec.workdir / "big.txt").exists()
    assert report.ok, said


# --- ask + patterns on every CLI that asks ---------------------------------------------------

ASKING = ["claude", "codex", "gemini", "opencode", "aider"]
YES = "echo approved-out | tee yes.txt; sleep 1"
NO = "echo denied-out > no.txt"


def asking_rule(cli: str, marker: str, command: str) -> Rule:
    """The model asks to run ``command``, then answers with the result block."""
    if cli == "aider":  # no tool protocol: the bash block and the block in one reply
        return rule(marker, f"Running it.\n\n```bash\n{command}\n```\n\n{RESULT}")
    # Codex asks only for a command that wants out of its sandbox.
    return rule(marker, "Running it.", command=command, after=RESULT, escalate=True)


@pytest.mark.parametrize("cli", ASKING)
async def test_ask_with_patterns_approves_by_pattern_and_asks_only_the_rest(
    cli: str, rig: RigFactory, llm: MockLLM
) -> None:
    llm.add(asking_rule(cli, "ASKPAT-YES", YES), asking_rule(cli, "ASKPAT-NO", NO))
    args = ("--edit-format", "diff") if cli == "aider" else ()
    r = await rig({"EXECUTER": AgentSpec(cli, args=args, options=Options(ask=True))})
    agent = r.agent("EXECUTER")
    driver = driver_for(r, agent, ApprovalPolicy.of("ask", [r"^echo approved-out "]))
    seen: list[tuple[str, str]] = []
    user = asyncio.create_task(answer_as_user(r.store, agent, seen, Decision.DENY))
    try:
        # A command the pattern matches runs without asking anyone (nor does aider's
        # follow-up about its output reach the user).
        first = await driver.run_turn(prompt("ASKPAT-YES"), Expect.block("result"), timeout=240)
        assert first.ok, (first.error, first.screen)
        assert (agent.spec.workdir / "yes.txt").read_text().strip() == "approved-out"
        assert seen == [], seen
        decided = approvals(r.store)
        assert decided and all(d["decision"] == "approve" for d in decided), decided
        assert decided[0]["command"] == YES and decided[0]["by"] == "policy", decided
        assert all(d["by"] == "follow-up" for d in decided[1:]), decided
        # Any other command is asked of the user, naming it; the user denies it.
        await driver.run_turn(
            prompt("ASKPAT-NO"), Expect.block("result"), timeout=120, nudge=None, idle_after=10
        )
    finally:
        user.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await user
    assert [c for _, c in seen] == [NO], seen
    all_asked = approvals(r.store, "approval-asked")
    assert len(all_asked) == 1, all_asked
    (asked,) = all_asked
    assert asked["command"] == NO and asked["complete"] is True, asked
    last = approvals(r.store)[-1]
    assert (last["command"], last["decision"], last["by"]) == (NO, "deny", "user"), last
    assert not (agent.spec.workdir / "no.txt").exists()
