"""Follow-up questions and questions whose command cannot be read, on recorded real screens.

aider asks "Add command output to the chat?" right after a "Run shell command?" it ran: a
follow-up naming no command, which gets the verdict of the command decided before it,
under every policy (approve, deny, ask, ask and deny with patterns). A real pane steps
through aider's recorded screens, one per answer it reads from the keys we press.
Claude Code's tall box with a "Parser aborted" note is read whole from the history; a box
whose command cannot be read at all (2.1.332 scrolls it inside the box) is incomplete and
shows its screen lines, never an empty command as if complete.
"""

from __future__ import annotations

import pathlib
import shlex
import typing as t

import pytest

from politerm.agents import load_profile
from politerm.agents.approval import (
    ApprovalPolicy,
    Decision,
    PendingApproval,
    answer_pending,
    get_pending,
    set_pending,
)
from politerm.agents.question import read_request
from politerm.driver.approvals import Approver
from politerm.store import RunStore
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import new_window
from tests.test_agents_cli import poli
from tests.test_approval_questions import OUTPUT, RUN, lines_of, screen

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer
    from politerm.tmux.pane import Pane

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
SECOND = "echo second-out; sleep 1"


class Policy(t.NamedTuple):
    test_id: str
    mode: str
    patterns: tuple[str, ...]
    user: Decision | None  # what `poli approve` answers when the run question is asked
    run: Decision  # the verdict on "Run shell command?", and so on its follow-up


POLICIES = [
    Policy("approve", "approve", (), None, Decision.APPROVE),
    Policy("deny", "deny", (), None, Decision.DENY),
    Policy("ask-approved", "ask", (), Decision.APPROVE, Decision.APPROVE),
    Policy("ask-denied", "ask", (), Decision.DENY, Decision.DENY),
    Policy("ask+pattern-match", "ask", (r"^echo second-out",), None, Decision.APPROVE),
    Policy("ask+pattern-miss", "ask", (r"^ls\b",), Decision.APPROVE, Decision.APPROVE),
    Policy("deny+pattern-match", "deny", (r"^echo second-out",), None, Decision.APPROVE),
    Policy("deny+pattern-miss", "deny", (r"^ls\b",), None, Decision.DENY),
]


def _script(tmp: pathlib.Path) -> list[str]:
    """aider's screens in a real pane: the run question, our answer, the output question.

    The terminal echoes the key we type after each question, as aider does; the two
    answers read are written to ``keys.txt``.
    """
    first = "\n".join(lines_of("aider-open-second-command.txt"))
    after = lines_of("aider-open-second-output.txt")
    at = max(i for i, ln in enumerate(after) if ln.startswith("Run shell command?"))
    (tmp / "s1").write_text(first)
    (tmp / "s2").write_text("\n".join(after[at + 1 :]))
    s1, s2, keys = (shlex.quote(str(tmp / n)) for n in ("s1", "s2", "keys.txt"))
    return ["sh", "-c", f"cat {s1}; read a; cat {s2}; read b; echo $a $b > {keys}; exec sleep 600"]


async def _shows(pane: Pane, last: str) -> None:
    async def shown() -> bool:
        snap = await pane.snapshot()
        return snap.lines[snap.cursor_y].rstrip() == last

    await aretry_until(shown, 60, what=f"the pane to show {last!r}")


async def _look(approver: Approver, pane: Pane) -> str:
    """The approver's look at the pane, once it is past the hold after our last keys."""
    said = ""

    async def looked() -> bool:
        nonlocal said
        said = await approver.look(await pane.snapshot())
        return said not in ("held", "none")

    await aretry_until(looked, 30, interval=0.1, what="the approver to read the question")
    return said


@pytest.mark.parametrize("case", POLICIES, ids=[c.test_id for c in POLICIES])
async def test_a_follow_up_gets_the_verdict_of_the_command_before_it(
    case: Policy, tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="q", argv=_script(tmp_path), size=(200, 50)
    )
    store = RunStore.open(tmp_path / "runs.sqlite3")
    policy = ApprovalPolicy.of(case.mode, case.patterns)
    approver = Approver("EXECUTER", load_profile("aider"), pane, policy, store)
    try:
        await _shows(pane, RUN)
        said = await _look(approver, pane)
        if case.user is not None:
            assert said == "asked"
            pending = get_pending(store, "EXECUTER")
            assert pending is not None and pending.command == SECOND
            answer_pending(store, "EXECUTER", case.user)
            said = await _look(approver, pane)
        assert said == "answered"
        await _shows(pane, OUTPUT)
        # The follow-up is answered at once, never asked of the user.
        assert await _look(approver, pane) == "answered"
        assert get_pending(store, "EXECUTER") is None
        yes = "y" if case.run is Decision.APPROVE else "n"

        async def both_read() -> bool:
            return (tmp_path / "keys.txt").is_file()

        await aretry_until(both_read, 30, what="the pane to read both answers")
        assert (tmp_path / "keys.txt").read_text().split() == [yes, yes]
        run, output = [e.data or {} for e in store.list_events() if e.kind == "approval"]
        assert (run["question"], run["command"], run["decision"]) == (RUN, SECOND, case.run.value)
        assert run["by"] == ("user" if case.user is not None else "policy")
        assert (output["question"], output["command"]) == (OUTPUT, "")
        assert (output["decision"], output["by"], output["follow_up"]) == (
            case.run.value,
            "follow-up",
            True,
        )
        done = "approved" if case.run is Decision.APPROVE else "denied"
        assert output["reason"] == f"follows {SECOND}, {done} by {run['by']}"
        asked = [e for e in store.list_events() if e.kind == "approval-asked"]
        assert len(asked) == (case.user is not None)
    finally:
        store.close()
        await pane.kill()


@pytest.mark.parametrize("mode", ["ask", "deny"])
def test_a_follow_up_with_no_command_decided_before_it_goes_to_the_policy(
    mode: str, tmp_path: pathlib.Path
) -> None:
    # A person answered the run question in the pane: its verdict is unknown, so the
    # follow-up is the policy's (a pattern never matches a question with no command).
    request = load_profile("aider").approval_request(screen("aider-open-second-output.txt"))
    assert request is not None and request.follow_up and not request.complete
    verdict = ApprovalPolicy.of(mode, [r"^echo second-out"]).decide(request)
    assert verdict.decision is (None if mode == "ask" else Decision.DENY), verdict


async def test_a_follow_up_asked_of_the_user_says_it_names_no_command(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    text = "\n".join(lines_of("aider-open-second-output.txt"))
    (tmp_path / "s").write_text(text)
    argv = ["sh", "-c", f"cat {shlex.quote(str(tmp_path / 's'))}; exec sleep 600"]
    pane = await new_window(tmux_session, tmux_server, session="t", name="q", argv=argv)
    store = RunStore.open(tmp_path / "runs.sqlite3")
    policy = ApprovalPolicy.of("ask", [r"^echo second-out"])
    approver = Approver("EXECUTER", load_profile("aider"), pane, policy, store)
    try:
        await _shows(pane, OUTPUT)
        assert await _look(approver, pane) == "asked"
        pending = get_pending(store, "EXECUTER")
        assert pending is not None and pending.follow_up
        (asked,) = [e for e in store.list_events() if e.kind == "approval-asked"]
        assert asked.detail.startswith(
            f'EXECUTER asks "{OUTPUT}" (a follow-up question; it names no command): '
        ), asked.detail
        assert "asks to run" not in asked.detail
    finally:
        store.close()
        await pane.kill()


# --- poli approve says what was answered ------------------------------------------------------


def test_poli_approve_says_a_question_was_answered_not_a_command_run(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    store = RunStore.open(tmp_path / "runs.sqlite3")
    try:
        store.upsert_agent(
            "EXECUTER", session="poli", pane_id="%1", command="aider", cwd=str(tmp_path),
            profile="aider", resume_command=None, env=None,
        )  # fmt: skip
        pending = approval_of(OUTPUT, follow_up=True)
        set_pending(store, pending)
        result = poli("approve", "EXECUTER", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f'approved: EXECUTER asked "{OUTPUT}", answered yes'
        set_pending(store, approval_of("Do you want to proceed?"))
        result = poli("approve", "EXECUTER", "--deny", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == (
            'denied: EXECUTER asked "Do you want to proceed?", answered no'
        )
    finally:
        store.close()


def approval_of(question: str, *, follow_up: bool = False) -> PendingApproval:
    return PendingApproval(
        "EXECUTER", "", "", (question,), 1.0, question=question, follow_up=follow_up
    )


# --- Claude Code's tall boxes ------------------------------------------------------------------

# The 1500-line heredoc Claude Code 2.1.197 was asked to run: its box holds
# " Parser aborted (timeout, resource limit, or over-length)" above the question.
PARSER_ABORTED = "\n".join(
    ["cat > big.txt <<'EOF'", *(f"line {i} of the big file" for i in range(1, 1501)), "EOF"]
)


def test_a_box_with_a_parser_aborted_note_is_read_whole() -> None:
    profile = load_profile("claude")
    snap = screen("claude-parser-aborted.txt")
    on_screen = profile.approval_request(snap)
    assert on_screen is not None and not on_screen.complete and on_screen.command == ""
    lines = lines_of("claude-parser-aborted-history.txt")
    assert lines[-len(snap.lines) :] == list(snap.lines)
    request = read_request(profile, lines)
    assert request is not None
    assert (request.tool, request.command, request.complete) == ("Bash", PARSER_ABORTED, True)
    assert request.question == "Do you want to proceed?"


def test_a_box_whose_command_cannot_be_read_is_incomplete_and_shows_the_screen() -> None:
    # Claude Code 2.1.332 scrolls a tall command inside its box ("↑ 115 more lines"):
    # no line read holds the box's top, even with the history.
    profile = load_profile("claude")
    lines = lines_of("claude-2.1.332-scrolled-box.txt")
    request = read_request(profile, lines)
    assert request is not None
    assert (request.command, request.complete) == ("", False)
    assert request.doubt == "the top of the question's box is not among the lines read"
    assert request.evidence[0] == "Do you want to proceed?"
    assert "│ EOF" in request.evidence and "│ line 150 of the big file" in request.evidence
    verdict = ApprovalPolicy.of("ask", [r"."]).decide(request)
    assert verdict.decision is None


def test_a_box_the_command_regex_does_not_fit_is_never_complete() -> None:
    # The box's top is there but the command cannot be cut out of it (a note the profile
    # does not know sits where the question should follow): incomplete, with its lines.
    lines = lines_of("claude-02-tool-approval.txt")
    at = next(i for i, ln in enumerate(lines) if ln.startswith(" Do you want to proceed?"))
    lines = [*lines[:at], " An unknown note", "   more of it", "", *lines[at:]]
    request = read_request(load_profile("claude"), lines)
    assert request is not None
    assert (request.command, request.complete) == ("", False)
    assert request.doubt == "no command could be read from its box"
    assert "echo hi > out.txt" in request.evidence and "An unknown note" in request.evidence
    verdict = ApprovalPolicy.of("deny", [r"^echo "]).decide(request)
    assert verdict.decision is Decision.DENY


async def test_a_question_our_keys_answered_is_not_asked_again_while_the_screen_ticks(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # After the user's deny, the agent keeps its question on screen a moment while a
    # spinner elsewhere redraws: the screen changed, the question did not. It is the one
    # just answered, never a new one for the user (opencode did this in CI: asked twice).
    (tmp_path / "s1").write_text("\n".join(lines_of("aider-open-second-command.txt")))
    s1, keys, extra = (shlex.quote(str(tmp_path / n)) for n in ("s1", "keys.txt", "extra.txt"))
    tick = "printf '\\0337\\033[1;1Htick %s\\0338' $i"
    again = f"if read -t 0.1 b; then echo $b >> {extra}; fi"
    script = (
        f"cat {s1}; read a; echo $a > {keys}; printf '\\033[2J\\033[H'; cat {s1}; "
        f"for i in $(seq 1 25); do {tick}; {again}; done; "
        "printf '\\033[2J\\033[Hdone\\n'; exec sleep 600"
    )
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="q", argv=["bash", "-c", script],
        size=(200, 50),
    )  # fmt: skip
    store = RunStore.open(tmp_path / "runs.sqlite3")
    approver = Approver("EXECUTER", load_profile("aider"), pane, ApprovalPolicy.of("ask"), store)
    try:
        await _shows(pane, RUN)
        assert await _look(approver, pane) == "asked"
        answer_pending(store, "EXECUTER", Decision.DENY)
        assert await _look(approver, pane) == "answered"
        said: list[str] = []

        async def done() -> bool:
            snap = await pane.snapshot()
            if snap.lines[0].startswith("done"):
                return True
            said.append(await approver.look(snap))
            return False

        await aretry_until(done, 60, interval=0.05, what="the pane to finish its ticks")
        assert len(said) > 10 and set(said) == {"held"}, said
        assert (tmp_path / "keys.txt").read_text().split() == ["n"]
        assert not (tmp_path / "extra.txt").exists(), (tmp_path / "extra.txt").read_text()
        kinds = [e.kind for e in store.list_events() if e.kind in ("approval-asked", "approval")]
        assert kinds == ["approval-asked", "approval"], kinds
        assert get_pending(store, "EXECUTER") is None
    finally:
        store.close()
        await pane.kill()
