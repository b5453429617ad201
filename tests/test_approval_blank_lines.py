"""aider's shell command with a blank line inside: read whole, or never approved by pattern.

aider prints an empty line, then the command's lines padded with spaces to one length, then
"Run shell commands?". A blank line inside the command is thus a line of spaces on a tmux
pane (which keeps trailing spaces), and the empty line above the command is its top. The
screens are recorded from the real aider 0.86.2 (pretty and ``--no-pretty``); what cannot be
read with certainty (a PTY's right-stripped screen, lines of unequal length, fewer lines to
run than the question says) is incomplete, and a pattern over its tail never approves it.
"""

from __future__ import annotations

import pathlib
import shlex
import typing as t

import pytest

from politerm.agents import load_profile
from politerm.agents.approval import ApprovalPolicy, Decision
from politerm.agents.question import read_request
from politerm.driver.approvals import Approver
from politerm.pty.runner import PtyTerminal
from politerm.store import RunStore
from politerm.terminal import Snapshot
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import new_window

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
COMMAND = "echo one-a > a.txt\n\necho one-b > b.txt"
QUESTION = "Run shell commands? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]:"
TAIL = r"^echo one-b"  # matches only what is below the blank line
WHOLE = r"\Aecho one-a > a\.txt\n\necho one-b > b\.txt\Z"


def recorded(name: str) -> list[str]:
    """The recorded lines as tmux captured them (trailing spaces kept), blank end dropped."""
    lines = (SCREENS / name).read_text().split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def snap_of(lines: list[str], *, trailing_spaces: bool = True) -> Snapshot:
    last = len(lines) - 1
    return Snapshot(
        tuple(lines),
        cursor_x=len(lines[last].rstrip()) + 1,
        cursor_y=last,
        trailing_spaces=trailing_spaces,
    )


def question_at(lines: list[str]) -> int:
    return next(i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Run shell"))


SCREEN_FILES = {
    "aider": "aider-blank-line-command.txt",
    "aider-raw": "aider-raw-blank-line-command.txt",
}


@pytest.mark.parametrize("profile", sorted(SCREEN_FILES))
def test_a_command_with_a_blank_line_is_read_whole(profile: str) -> None:
    lines = recorded(SCREEN_FILES[profile])
    q = question_at(lines)
    assert lines[q - 2].strip() == "" and lines[q - 2] != "", "the blank line holds spaces"
    request = load_profile(profile).approval_request(snap_of(lines))
    assert request is not None
    assert request.complete, request.doubt
    assert (request.question, request.command) == (QUESTION, COMMAND)
    assert request.evidence == (QUESTION, "echo one-a > a.txt")


@pytest.mark.parametrize("profile", sorted(SCREEN_FILES))
def test_a_pattern_over_the_tail_does_not_approve_the_whole(profile: str) -> None:
    request = load_profile(profile).approval_request(snap_of(recorded(SCREEN_FILES[profile])))
    assert request is not None
    tail = ApprovalPolicy.of("deny", [TAIL]).decide(request)
    assert tail.decision is Decision.DENY
    assert tail.reason == f"policy 'deny': no approval pattern matches {COMMAND!r}"
    whole = ApprovalPolicy.of("deny", [TAIL, WHOLE]).decide(request)
    assert whole.decision is Decision.APPROVE
    assert whole.reason == f"pattern {WHOLE!r} matches the command"


class Doubt(t.NamedTuple):
    test_id: str
    change: t.Callable[[list[str]], list[str]]
    trailing_spaces: bool
    doubt: str


def _rstripped(lines: list[str]) -> list[str]:
    return [ln.rstrip() for ln in lines]


def _blank_emptied(lines: list[str]) -> list[str]:
    q = question_at(lines)
    return [*lines[: q - 2], "", *lines[q - 1 :]]


def _unpadded(lines: list[str]) -> list[str]:
    q = question_at(lines)
    return [*lines[: q - 3], "echo one-a", *lines[q - 2 :]]


def _two_lines_stripped(lines: list[str]) -> list[str]:
    q = question_at(lines)
    return _rstripped([*lines[: q - 2], *lines[q - 1 :]])


DOUBTS = [
    # A PTY's screen: the blank line inside the command looks like the empty line above,
    # so only the last line is read, and the question says it runs several.
    Doubt("pty-screen", _rstripped, False, "the question runs several lines, 1 read"),
    # Several lines on a PTY's screen: the line above them may be a blank line of theirs.
    Doubt("pty-two-lines", _two_lines_stripped, False, "the terminal drops trailing spaces"),
    # The blank line read as the command's top: one line read, the question says several.
    Doubt("blank-line-as-top", _blank_emptied, True, "the question runs several lines, 1 read"),
    Doubt("unequal-lines", _unpadded, True, "its lines are not padded to one length"),
]


@pytest.mark.parametrize("case", DOUBTS, ids=[c.test_id for c in DOUBTS])
@pytest.mark.parametrize("profile", sorted(SCREEN_FILES))
def test_a_command_not_read_with_certainty_is_never_approved_by_pattern(
    profile: str, case: Doubt
) -> None:
    lines = case.change(recorded(SCREEN_FILES[profile]))
    request = load_profile(profile).approval_request(
        snap_of(lines, trailing_spaces=case.trailing_spaces)
    )
    assert request is not None
    assert not request.complete
    assert request.doubt.startswith(case.doubt), request.doubt
    assert request.command == ""
    assert request.question == QUESTION
    verdict = ApprovalPolicy.of("deny", [TAIL, WHOLE, r"."]).decide(request)
    assert verdict.decision is Decision.DENY
    assert f"no command read in full for {QUESTION!r} ({request.doubt})" in verdict.reason


def test_one_line_to_run_under_a_comment_is_certain_on_any_terminal() -> None:
    # "# note", blank, "echo x": aider runs one line and says "command"; the comment is
    # never run, so the one line read is all that runs, even on a right-stripped screen.
    lines = ["Tokens: 1 sent, 2 received.", "", "echo x", "Run shell command? (Y)es/(N)o [Yes]:"]
    request = load_profile("aider").approval_request(snap_of(lines, trailing_spaces=False))
    assert request is not None and request.complete
    assert request.command == "echo x"


def test_a_question_line_inside_the_command_does_not_cut_it() -> None:
    # The command's own lines may look like aider's question: the command still runs from
    # the empty line above it down to the open question at the bottom.
    body = ["echo a", "Run shell command? (Y)es/(N)o [Yes]:", "rm -rf x"]
    width = max(map(len, body))
    lines = ["Tokens: 1 sent, 2 received.", "", *(ln.ljust(width) for ln in body), QUESTION]
    request = load_profile("aider").approval_request(snap_of(lines))
    assert request is not None and request.complete, request
    assert request.command == "\n".join(body)
    assert ApprovalPolicy.of("deny", [r"^rm -rf x$"]).decide(request).decision is Decision.DENY


def test_a_question_printed_by_a_command_does_not_lend_a_command() -> None:
    # The output question's box holds the command's output; a line in it that reads like
    # "Run shell command?" is output, not a command of the open question.
    lines = [
        "",
        "Running echo x",
        "rm -rf y",
        "Run shell command? (Y)es/(N)o [Yes]: y",
        "Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:",
    ]
    request = load_profile("aider").approval_request(snap_of(lines))
    assert request is not None
    assert request.question.startswith("Add command output to the chat?")
    assert request.command == ""


def _tall(rows: int) -> tuple[list[str], str]:
    """A command of ``rows`` lines with blank lines inside, as aider prints it."""
    body = [("" if i % 5 == 2 else f"echo line-{i:03d} >> tall.txt") for i in range(rows)]
    width = max(map(len, body))
    screen = ["Tokens: 1 sent, 2 received.", "", *(ln.ljust(width) for ln in body), QUESTION]
    return screen, "\n".join(body)


async def test_approver_reads_a_tall_command_from_the_pane_history(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    lines, command = _tall(60)
    path = tmp_path / "screen.txt"
    path.write_text("\n".join(lines))
    argv = ["sh", "-c", f"cat {shlex.quote(str(path))}; exec sleep 600"]
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="q", argv=argv, size=(120, 30)
    )

    async def shown() -> bool:
        snap = await pane.snapshot()
        return snap.lines[snap.cursor_y].rstrip() == QUESTION

    await aretry_until(shown, 60, what="the pane to show the tall aider command")
    snap = await pane.snapshot()
    on_screen = load_profile("aider").approval_request(snap)
    assert on_screen is not None and not on_screen.complete, "its top is above the screen"
    store = RunStore.open(tmp_path / "runs.sqlite3")
    line = r"echo line-\d+ >> tall\.txt"
    whole = rf"\Aecho line-000 >> tall\.txt\n(?:(?:{line})?\n)+echo line-059 >> tall\.txt\Z"
    policy = ApprovalPolicy.of("deny", [whole])
    approver = Approver("EXECUTER", load_profile("aider"), pane, policy, store)
    assert await approver.look(snap) == "answered"
    (event,) = [e for e in store.list_events() if e.kind == "approval"]
    assert event.data is not None
    assert (event.data["decision"], event.data["command"]) == ("approve", command)
    assert event.data["complete"] is True and event.data["doubt"] == ""
    store.close()
    await pane.kill()


async def test_approver_on_a_pty_denies_a_blank_line_command_it_cannot_read_whole(
    tmp_path: pathlib.Path,
) -> None:
    text = "\n".join(recorded("aider-blank-line-command.txt"))
    path = tmp_path / "screen.txt"
    path.write_text(text)
    argv = ["sh", "-c", f"cat {shlex.quote(str(path))}; exec sleep 600"]
    term = await PtyTerminal.spawn(argv, size=(120, 40), name="q")
    try:

        async def shown() -> bool:
            snap = await term.snapshot()
            return snap.lines[snap.cursor_y].rstrip() == QUESTION

        await aretry_until(shown, 60, what="the PTY to show the recorded question")
        store = RunStore.open(tmp_path / "runs.sqlite3")
        approver = Approver(
            "epic.s1", load_profile("aider"), term, ApprovalPolicy.of("deny", [TAIL]), store
        )
        assert await approver.look(await term.snapshot()) == "answered"
        (event,) = [e for e in store.list_events() if e.kind == "approval"]
        assert event.data is not None
        assert event.data["decision"] == "deny"
        assert (event.data["command"], event.data["complete"]) == ("", False)
        assert event.data["doubt"] == "the question runs several lines, 1 read"
        assert event.data["keys"] == ["n", "Enter"]
        store.close()
    finally:
        await term.kill(grace=1.0)


def test_history_lines_keep_the_screen_rule() -> None:
    # The driver reads the history with the same rule as the screen (one reader).
    lines, command = _tall(12)
    request = read_request(load_profile("aider"), lines)
    assert request is not None and request.complete
    assert request.command == command
    stripped = read_request(load_profile("aider"), _rstripped(lines), trailing_spaces=False)
    assert stripped is not None and not stripped.complete
    assert stripped.doubt.startswith("the terminal drops trailing spaces")
