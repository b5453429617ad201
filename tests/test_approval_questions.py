"""Approval questions on recorded real screens: the open-question rule and tall boxes.

aider leaves every answered question on screen, so the question that is open is the lowest
one, at the cursor, and its command is read from its own lines only. Claude Code's
approval box can be taller than the screen; it is then read from the pane's history.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
import sys
import typing as t

import pytest

from politerm.agents import AgentState, load_profile
from politerm.agents.approval import ApprovalPolicy, Decision, get_pending
from politerm.agents.question import read_request
from politerm.driver.approvals import Approver
from politerm.pty.runner import PtyTerminal
from politerm.store import RunStore
from politerm.terminal import Snapshot
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import new_window

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer
    from politerm.tmux.pane import Pane

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
RUN = "Run shell command? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]:"
OUTPUT = "Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:"
# The 150-line heredoc Claude Code was asked to run (tests/realcli records it the same way).
HEREDOC = "\n".join(
    ["cat > big.txt <<'EOF'", *(f"line {i} of the big file" for i in range(1, 151)), "EOF"]
)
HEREDOC_PATTERN = r"\Acat > big\.txt <<'EOF'\n(line \d+ of the big file\n)+EOF\Z"


def lines_of(name: str) -> list[str]:
    lines = (SCREENS / name).read_text().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def screen(name: str, *, cursor_below: bool = False) -> Snapshot:
    """A recorded screen; the cursor at the end of its last line (or on the line below)."""
    lines = lines_of(name)
    last = len(lines) - 1
    if cursor_below:
        lines.append("")
    return Snapshot(tuple(lines), cursor_x=len(lines[last]), cursor_y=last + cursor_below)


class Case(t.NamedTuple):
    test_id: str
    profile: str
    file: str
    question: str | None  # None: no question is open
    command: str = ""


AIDER_CASES = [
    Case("pretty-output-after-run", "aider", "aider-open-output-question.txt", OUTPUT),
    Case("pretty-second-command", "aider", "aider-open-second-command.txt", RUN,
         "echo second-out; sleep 1"),
    Case("pretty-second-output", "aider", "aider-open-second-output.txt", OUTPUT),
    Case("pretty-all-answered", "aider", "aider-open-all-answered.txt", None),
    Case("raw-output-after-run", "aider-raw", "aider-raw-open-output-question.txt", OUTPUT),
    Case("raw-second-command", "aider-raw", "aider-raw-open-second-command.txt", RUN,
         "echo second-out; sleep 1"),
    Case("first-command", "aider", "aider-diff-shell-approval.txt",
         "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:", "echo hi > out.txt"),
]  # fmt: skip


@pytest.mark.parametrize("case", AIDER_CASES, ids=[c.test_id for c in AIDER_CASES])
def test_aider_question_is_the_open_one(case: Case) -> None:
    profile = load_profile(case.profile)
    snap = screen(case.file)
    request = profile.approval_request(snap)
    if case.question is None:
        assert request is None
        assert profile.detect(snap).state is not AgentState.WAITING_APPROVAL
        return
    assert profile.detect(snap).state is AgentState.WAITING_APPROVAL
    assert request is not None
    assert request.question == case.question
    assert request.command == case.command
    # A request with no command is never complete; the output question is a follow-up.
    assert request.complete is bool(case.command)
    assert request.follow_up is (case.question == OUTPUT)
    assert request.evidence[0] == case.question


@pytest.mark.parametrize("name", ["aider-open-output-question.txt", "aider-open-second-output.txt"])
def test_pattern_of_an_answered_command_does_not_answer_the_next_question(name: str) -> None:
    # The bug: "Add command output to the chat?" was approved by the pattern that matched
    # the command of the answered "Run shell command?" above it.
    request = load_profile("aider").approval_request(screen(name))
    assert request is not None
    verdict = ApprovalPolicy.of("deny", [r"^echo (first|second)-out"]).decide(request)
    assert verdict.decision is Decision.DENY, verdict
    assert "Add command output to the chat?" in verdict.reason


def test_a_question_answered_with_enter_alone_is_not_open() -> None:
    # "[Yes]: " with nothing typed looks open; what aider printed below it says otherwise.
    lines = [*lines_of("aider-open-second-command.txt"), "", "Running echo second-out; sleep 1"]
    snap = Snapshot((*lines, "second-out"), cursor_y=len(lines))
    profile = load_profile("aider")
    assert profile.approval_request(snap) is None
    assert profile.detect(snap).state is not AgentState.WAITING_APPROVAL


def test_open_question_under_a_line_the_terminal_wrapped() -> None:
    # aider drew "Asking." after a run of spaces wider than the pane; the joined capture
    # (-J) holds one line where the screen has two rows, so the cursor's row is one past
    # the question's index. The question is still the open one.
    snap = screen("aider-open-after-wrapped-line.txt", cursor_below=True)
    profile = load_profile("aider")
    assert profile.detect(snap).state is AgentState.WAITING_APPROVAL
    request = profile.approval_request(snap)
    assert request is not None
    assert request.command == "echo denied > no.txt"
    assert request.question == "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:"


class TallCase(t.NamedTuple):
    test_id: str
    screen: str
    history: str
    tool: str
    command: str


TALL_CASES = [
    TallCase("bash-heredoc", "claude-tall-bash.txt", "claude-tall-bash-history.txt",
             "Bash", HEREDOC),
    TallCase("write", "claude-tall-write.txt", "claude-tall-write-history.txt", "Create", "w.txt"),
    TallCase("edit", "claude-tall-edit.txt", "claude-tall-edit-history.txt", "Edit", "w.txt"),
]  # fmt: skip


@pytest.mark.parametrize("case", TALL_CASES, ids=[c.test_id for c in TALL_CASES])
def test_tall_claude_box_is_read_with_its_history(case: TallCase) -> None:
    profile = load_profile("claude")
    snap = screen(case.screen)
    on_screen = profile.approval_request(snap)
    assert on_screen is not None
    assert not on_screen.complete, "the box's top is above the screen"
    assert on_screen.command == ""
    lines = lines_of(case.history)
    assert lines[-len(snap.lines) :] == list(snap.lines)
    request = read_request(profile, lines)
    assert request is not None
    assert request.complete
    assert (request.tool, request.command) == (case.tool, case.command)
    assert request.question == on_screen.question


def test_a_pattern_never_approves_a_box_read_in_part() -> None:
    request = load_profile("claude").approval_request(screen("claude-tall-bash.txt"))
    assert request is not None and not request.complete
    verdict = ApprovalPolicy.of("deny", [r"^cat > big\.txt", r"EOF$", r"."]).decide(request)
    assert verdict.decision is Decision.DENY
    assert "no command read in full" in verdict.reason


def test_a_short_claude_box_reads_the_command_without_its_description() -> None:
    request = load_profile("claude").approval_request(screen("claude-02-tool-approval.txt"))
    assert request is not None
    assert (request.tool, request.command) == ("Bash", "echo hi > out.txt")
    assert request.question == "Do you want to proceed?"


# --- the approver on a real pane ------------------------------------------------------------


async def _pane_showing(
    client: ControlClient, server: TmuxServer, name: str, tmp: pathlib.Path
) -> Pane:
    """A real pane whose screen and history hold a recorded capture, cursor at its end."""
    text = "\n".join(lines_of(name))
    path = tmp / f"{name}.screen"
    path.write_text(text)
    argv = ["sh", "-c", f"cat {shlex.quote(str(path))}; exec sleep 600"]
    pane = await new_window(client, server, session="t", name="q", argv=argv, size=(200, 50))
    last = text.rsplit("\n", 1)[-1].rstrip()

    async def shown() -> bool:
        snap = await pane.snapshot()
        return snap.cursor_y < len(snap.lines) and snap.lines[snap.cursor_y].rstrip() == last

    await aretry_until(shown, 60, what=f"the pane to show {name}")
    return pane


async def test_approver_reads_a_tall_box_from_the_pane_history(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    pane = await _pane_showing(tmux_session, tmux_server, "claude-tall-bash-history.txt", tmp_path)
    store = RunStore.open(tmp_path / "runs.sqlite3")
    policy = ApprovalPolicy.of("deny", [HEREDOC_PATTERN])
    approver = Approver("EXECUTER", load_profile("claude"), pane, policy, store)
    snap = await pane.snapshot()
    assert snap.history_size > 0, "the box's top must be in the history"
    # A screen that no longer matches the pane (it moved between the reads) is looked at
    # again later, never decided on a box read in part.
    moved = dataclasses.replace(snap, lines=(*snap.lines[:-1], "a line drawn since"))
    assert await approver.look(moved) == "none"
    assert not store.list_events()
    assert await approver.look(snap) == "answered"
    (event,) = [e for e in store.list_events() if e.kind == "approval"]
    assert event.data is not None
    assert event.data["decision"] == "approve"
    assert event.data["command"] == HEREDOC
    assert event.data["question"] == "Do you want to proceed?"
    assert event.data["keys"] == ["Enter"]
    assert "Bash(cat > big.txt <<'EOF' … +151 lines)" in event.detail
    store.close()
    await pane.kill()


async def test_approver_asks_about_the_open_question_and_records_it(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    pane = await _pane_showing(
        tmux_session, tmux_server, "aider-open-output-question.txt", tmp_path
    )
    store = RunStore.open(tmp_path / "runs.sqlite3")
    approver = Approver("EXECUTER", load_profile("aider"), pane, ApprovalPolicy.of("ask"), store)
    assert await approver.look(await pane.snapshot()) == "asked"
    pending = get_pending(store, "EXECUTER")
    assert pending is not None
    assert (pending.question, pending.command) == (OUTPUT, "")
    assert pending.what == OUTPUT
    (asked,) = [e for e in store.list_events() if e.kind == "approval-asked"]
    assert asked.data is not None and asked.data["question"] == OUTPUT
    assert not re.search(r"echo first-out", asked.detail), asked.detail
    store.close()
    await pane.kill()


async def test_approver_reads_a_tall_box_from_the_pty_history(tmp_path: pathlib.Path) -> None:
    text = "\n".join(lines_of("claude-tall-bash-history.txt"))
    path = tmp_path / "screen.txt"
    path.write_text(text)
    argv = ["sh", "-c", f"cat {shlex.quote(str(path))}; exec sleep 600"]
    term = await PtyTerminal.spawn(argv, size=(200, 50), name="q")
    try:
        last = text.rsplit("\n", 1)[-1].rstrip()

        async def shown() -> bool:
            snap = await term.snapshot()
            return snap.lines[snap.cursor_y].rstrip() == last

        await aretry_until(shown, 60, what="the PTY to show the recorded box")
        store = RunStore.open(tmp_path / "runs.sqlite3")
        policy = ApprovalPolicy.of("deny", [HEREDOC_PATTERN])
        approver = Approver("epic.s1", load_profile("claude"), term, policy, store)
        assert await approver.look(await term.snapshot()) == "answered"
        (event,) = [e for e in store.list_events() if e.kind == "approval"]
        assert event.data is not None
        assert (event.data["decision"], event.data["command"]) == ("approve", HEREDOC)
        store.close()
    finally:
        await term.kill(grace=1.0)


# opencode under load draws its question before the command in it (CI: the user was asked
# about '' and then, the command drawn, asked again).
OPENCODE_DRAWN = [
    "  ┃",
    "  ┃  Please run it. (nonce=be7644)",
    "  ┃",
    "     ▣  Build · Mock Model",
    "  ┃",
    "  ┃  △ Permission required",
    "  ┃    # Shell command",
    "  ┃",
    "  ┃  $ echo denied-out > no.txt",
    "  ┃",
    "  ┃   Allow once   Allow always   Reject          ctrl+f fullscreen  ⇆ select",
]
OPENCODE_IN_PART = [ln for ln in OPENCODE_DRAWN if "$ echo" not in ln]


async def test_a_question_drawn_before_its_command_is_asked_once_with_the_command(
    tmp_path: pathlib.Path,
) -> None:
    # The box first without its command; a line on stdin draws the whole box.
    script = tmp_path / "draw.py"
    script.write_text(
        "import sys\n"
        f"print('\\n'.join({OPENCODE_IN_PART!r}), flush=True)\n"
        "sys.stdin.readline()\n"
        f"print('\\x1b[2J\\x1b[H' + '\\n'.join({OPENCODE_DRAWN!r}), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    term = await PtyTerminal.spawn([sys.executable, str(script)], size=(120, 40), name="q")
    store = RunStore.open(tmp_path / "runs.sqlite3")
    approver = Approver("EXECUTER", load_profile("opencode"), term, ApprovalPolicy(), store)
    try:

        async def showing(lines: list[str]) -> bool:
            snap = await term.snapshot()
            return [ln.rstrip() for ln in snap.lines[: len(lines)]] == lines

        await aretry_until(lambda: showing(OPENCODE_IN_PART), 30, what="the box in part")
        assert await approver.look(await term.snapshot()) == "none"
        assert get_pending(store, "EXECUTER") is None
        await term.send_keys("Enter")
        await aretry_until(lambda: showing(OPENCODE_DRAWN), 30, what="the whole box")
        assert await approver.look(await term.snapshot()) == "asked"
        pending = get_pending(store, "EXECUTER")
        assert pending is not None and pending.command == "echo denied-out > no.txt"
        assert len([e for e in store.list_events() if e.kind == "approval-asked"]) == 1
    finally:
        store.close()
        await term.kill(grace=1.0)
