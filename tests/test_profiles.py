"""Agent profiles as data: detectors on recorded real screens, the tracker, approval policy."""

from __future__ import annotations

import pathlib
import shlex
import sys
import typing as t

import pytest

from politerm.agents import AgentProfile, AgentState, Detectors, StateTracker, load_profile
from politerm.agents.approval import (
    ApprovalPolicy,
    Decision,
    answer_pending,
    get_pending,
)
from politerm.agents.profile import ApprovalRequest, list_profiles
from politerm.errors import ProfileError, RoutingError
from politerm.messaging.routing import run_task
from politerm.store.models import TaskState
from politerm.terminal import Snapshot
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import aretry_until
from tests.loophelpers import (
    EXECUTER_HEAD,
    PLANNER_OK,
    RESULT,
    block,
    open_loop,
    rule,
    write_project,
)

if t.TYPE_CHECKING:
    import libtmux

    from politerm.tmux import ControlClient, TmuxServer

SCREENS = pathlib.Path(__file__).parent / "fixtures" / "screens"
ANY = object()  # input text not asserted


def screen(name: str, *, cursor_below: bool = False, title: str = "") -> Snapshot:
    """A fixture as a snapshot; the cursor sits at the end of the last non-blank line.

    ``cursor_below`` puts it on the line under it, where a line REPL leaves it while working.
    """
    lines = (SCREENS / name).read_text().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    last = max(i for i, ln in enumerate(lines) if ln.strip())
    if cursor_below:
        if last + 1 >= len(lines):
            lines.append("")
        return Snapshot(tuple(lines), cursor_x=0, cursor_y=last + 1, title=title)
    return Snapshot(tuple(lines), cursor_x=len(lines[last].rstrip()), cursor_y=last, title=title)


# --- detectors on the real screens ---------------------------------------------------------


class ScreenCase(t.NamedTuple):
    test_id: str
    profile: str
    state: AgentState
    input_text: object = ANY
    dialog: str | None = None
    command: str | None = None
    tool: str | None = None
    evidence: str | None = None
    cursor_below: bool = False
    recorded: str | None = None

    @property
    def file(self) -> str:
        return self.recorded or f"{self.test_id}.txt"


R, B, A, D, E = (
    AgentState.READY,
    AgentState.BUSY,
    AgentState.WAITING_APPROVAL,
    AgentState.DIALOG,
    AgentState.ERROR,
)
U = AgentState.UNKNOWN

# Screens that hold a tagged block are used under their recorded names: test_protocol.py
# wants a parser case for every screen with a block, and a copy would need a second one.
SCREEN_CASES = [
    ScreenCase("claude_ready", "claude", R, ""),
    ScreenCase("claude_plan", "claude", R, "", recorded="claude-01-plan.txt"),
    ScreenCase(
        "claude_busy", "claude", B, "", evidence="esc to interrupt",
        recorded="claude-03-busy.txt",
    ),
    ScreenCase(
        "claude_approval", "claude", A, command="echo hi > out.txt", tool="Bash",
        evidence="Do you want to proceed?", recorded="claude-02-tool-approval.txt"),
    ScreenCase("claude_done", "claude", R, "", recorded="claude-02-tool-done.txt"),
    ScreenCase("claude_input", "claude", R, "B-line-one"),
    ScreenCase("codex_ready", "codex", R, ""),
    ScreenCase("codex_plan", "codex", R, "", recorded="codex-01-plan.txt"),
    ScreenCase(
        "codex_busy", "codex", B, "", evidence="◦ Working (3s • esc to interrupt)",
        recorded="codex-03-busy.txt",
    ),
    ScreenCase("codex_done", "codex", R, "", recorded="codex-02-tool-done.txt"),
    ScreenCase("codex_trust_dialog", "codex", D, dialog="folder-trust"),
    ScreenCase("codex_input", "codex", R, "B-line-one"),
    ScreenCase("codex_inline_ready", "codex", R, ""),
    ScreenCase("codex_inline_busy", "codex", B, "", recorded="codex-inline-03-busy.txt"),
    ScreenCase("codex_inline_done", "codex", R, "", recorded="codex-inline-02-tool-done.txt"),
    ScreenCase("gemini_ready", "gemini", R, ""),
    ScreenCase("gemini_plan", "gemini", R, "", recorded="gemini-01-plan.txt"),
    ScreenCase(
        "gemini_busy", "gemini", B, "", evidence="⠧ Thinking... (esc to cancel, 3s)",
        recorded="gemini-03-busy.txt",
    ),
    ScreenCase(
        "gemini_approval", "gemini", A, command="echo hi > out.txt", tool="Shell",
        evidence="Allow execution of [Shell]?", recorded="gemini-02-tool-approval.txt"),
    ScreenCase("gemini_done", "gemini", R, "", recorded="gemini-02-tool-done.txt"),
    # Loop detection halts the request and says so right above the input box.
    ScreenCase(
        "gemini_loop_dialog", "gemini", E, "", evidence="ℹ A potential loop was detected",
        recorded="gemini-loop-detection-dialog.txt",
    ),
    ScreenCase("gemini_trust_dialog", "gemini", D, dialog="folder-trust"),
    # Text typed, not yet submitted: neither ready-and-empty nor busy.
    ScreenCase("gemini_input", "gemini", U, "B-line-one"),
    # A hook still running: the box is drawn, but a prompt submitted now is dropped.
    ScreenCase(
        "gemini_hook", "gemini", B, "", evidence="Executing Hook: poli-receipt-SessionStart"
    ),
    ScreenCase("opencode_ready", "opencode", R, ""),
    ScreenCase("opencode_plan", "opencode", R, "", recorded="opencode-01-plan.txt"),
    ScreenCase(
        "opencode_busy", "opencode", B, "", evidence="esc interrupt",
        recorded="opencode-03-busy.txt",
    ),
    ScreenCase("opencode_done", "opencode", R, "", recorded="opencode-02-tool-done.txt"),
    ScreenCase("opencode_input", "opencode", R, "B-line-two"),
    ScreenCase("aider_ready", "aider", R, ""),
    ScreenCase("aider_plan", "aider", R, "", recorded="aider-01-plan.txt"),
    ScreenCase(
        "aider_busy", "aider", B, None, evidence="Waiting for openai/mock",
        recorded="aider-03-busy.txt",
    ),
    ScreenCase(
        "aider_approval", "aider", A, None, command="echo hi > out.txt",
        evidence="Run shell command?",
    ),
    ScreenCase("aider_shell_done", "aider", R, ""),
    ScreenCase("aider_done", "aider", R, "", recorded="aider-02-tool-done.txt"),
    ScreenCase("aider_input", "aider", U, "B-line-two"),
    ScreenCase("aider-raw_ready", "aider-raw", R, ""),
    ScreenCase("aider-raw_plan", "aider-raw", R, "", recorded="aider-raw-01-plan.txt"),
    ScreenCase("aider-raw_done", "aider-raw", R, "", recorded="aider-raw-02-tool-done.txt"),
    # No spinner in --no-pretty mode: the cursor has left the prompt.
    ScreenCase(
        "aider-raw_busy", "aider-raw", B, None, cursor_below=True,
        recorded="aider-raw-03-busy.txt",
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", SCREEN_CASES, ids=[c.test_id for c in SCREEN_CASES])
def test_detects_recorded_screen(case: ScreenCase) -> None:
    profile = load_profile(case.profile)
    snap = screen(case.file, cursor_below=case.cursor_below)
    reading = profile.detect(snap)
    assert reading.state is case.state, reading
    assert reading.evidence, "every reading carries evidence"
    assert reading.dialog == case.dialog
    if case.input_text is not ANY:
        assert reading.input_text == case.input_text
    if case.evidence is not None:
        assert any(case.evidence in line for line in reading.evidence), reading.evidence
    request = profile.approval_request(snap)
    if case.state is AgentState.WAITING_APPROVAL:
        assert request is not None
        assert request.command == case.command
        assert request.tool == (case.tool or "")
    else:
        assert request is None


def test_every_screen_fixture_has_a_case() -> None:
    named = {p.name for p in SCREENS.glob("*_*.txt")}
    assert named == {c.file for c in SCREEN_CASES if c.recorded is None}
    assert all((SCREENS / c.file).is_file() for c in SCREEN_CASES)


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "opencode", "aider", "aider-raw"])
def test_real_cli_profiles_are_complete(name: str) -> None:
    profile = load_profile(name)
    assert profile.command, "a real CLI profile names its program"
    assert profile.approval.approve and profile.approval.deny
    assert profile.stuck_after > 0
    assert profile.detectors.region_lines > 0


def test_every_profile_loads() -> None:
    names = list_profiles()
    for required in ("claude", "codex", "gemini", "opencode", "aider", "aider-raw", "shell"):
        assert required in names
    for name in names:
        assert load_profile(name).name == name


# --- aider's yes/no questions (texts from realcli.md; no recorded screen) -----------------

AIDER_QUESTIONS = [
    ("gitignore", "Add .aider* to .gitignore (recommended)? (Y)es/(N)o [Yes]: "),
    ("docs-url", "Open documentation url for more info? (Y)es/(N)o/(D)on't ask again [Yes]: "),
    ("release-notes", "Would you like to see what's new in this version? (Y)es/(N)o [Yes]: "),
]


@pytest.mark.parametrize(
    ("dialog", "question"), AIDER_QUESTIONS, ids=[q[0] for q in AIDER_QUESTIONS]
)
def test_aider_startup_questions_are_dialogs_until_answered(dialog: str, question: str) -> None:
    profile = load_profile("aider")
    lines = ("Aider v0.86.2", "Model: openai/mock with whole edit format", question.rstrip())
    open_q = Snapshot(lines, cursor_x=len(question), cursor_y=2)
    reading = profile.detect(open_q)
    assert (reading.state, reading.dialog) == (AgentState.DIALOG, dialog)
    assert profile.dialogs[[d.name for d in profile.dialogs].index(dialog)].keys == ["n", "Enter"]
    # Answered: the question stays on screen with the answer after it, and a prompt follows.
    answered = Snapshot((*lines[:2], question + "n", "─" * 40, "> "), cursor_x=2, cursor_y=4)
    assert profile.detect(answered).state is AgentState.READY


def test_unknown_yes_no_question_is_an_approval() -> None:
    profile = load_profile("aider")
    snap = Snapshot(("Create new file notes.md? (Y)es/(N)o [Yes]:",), cursor_x=45, cursor_y=0)
    assert profile.detect(snap).state is AgentState.WAITING_APPROVAL


# --- the pane title, profile loading ---------------------------------------------------------


def _profile(**detectors: t.Any) -> AgentProfile:
    return AgentProfile(name="t", detectors=Detectors(**detectors))


def test_title_decides_only_when_the_screen_does_not() -> None:
    prof = _profile(busy=["working"], title_busy=["^✦ "], title_ready=["^◇ "])
    assert prof.detect(Snapshot(("...",), title="✦  Working… (proj)")).state is AgentState.BUSY
    reading = prof.detect(Snapshot(("...",), title="◇  Ready (proj)"))
    assert (reading.state, reading.evidence) == (AgentState.READY, ("title: ◇  Ready (proj)",))
    # The screen wins over the title.
    assert prof.detect(Snapshot(("working",), title="◇  Ready")).state is AgentState.BUSY
    assert prof.detect(Snapshot(("...",))).state is AgentState.UNKNOWN


def test_stuck_message_wins_over_busy() -> None:
    prof = load_profile("claude")
    lines = ("  ⎿  Credit balance is too low", "", "  esc to interrupt")
    reading = prof.detect(Snapshot(lines))
    assert reading.state is AgentState.STUCK
    assert "Credit balance" in reading.evidence[0]


def test_extends_merges_tables_and_replaces_env(monkeypatch: pytest.MonkeyPatch) -> None:
    udir = pathlib.Path.home() / "agents"
    udir.mkdir()
    monkeypatch.setattr("politerm.agents.profile.user_profile_dir", lambda: udir)
    (udir / "my-claude.toml").write_text(
        'extends = "claude"\ncommand = ["my-claude"]\nenv = {}\n'
        '[detectors]\nregion_lines = 5\n[approval]\napprove = ["1"]\n'
    )
    prof = load_profile("my-claude")
    base = load_profile("claude")
    assert prof.command == ["my-claude"] and prof.env == {}
    assert prof.detectors.region_lines == 5
    assert prof.detectors.busy == base.detectors.busy
    assert prof.approval.approve == ["1"] and prof.approval.deny == base.approval.deny
    assert prof.launch_argv(unsafe=True) == ["my-claude", "--dangerously-skip-permissions"]
    (udir / "bad.toml").write_text('[approval]\ncommand = "no group"\n')
    with pytest.raises(ProfileError, match=r"bad\.toml: approval"):
        load_profile("bad")


def test_launch_argv_and_env_keep_unattended_apart() -> None:
    prof = load_profile("opencode")
    assert prof.launch_argv() == ["opencode"]
    assert "OPENCODE_PERMISSION" not in prof.launch_env()
    assert "OPENCODE_PERMISSION" in prof.launch_env(unsafe=True)
    assert load_profile("codex").launch_argv(resume=True)[-2:] == ["resume", "--last"]


async def test_pane_title_reaches_the_snapshot(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    from politerm.tmux.pane import new_window

    argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="fa",
        argv=[*argv, "--name", "poli-title-test"], cwd=tmp_path,
    )  # fmt: skip

    async def titled() -> bool:
        return (await pane.snapshot()).title == "poli-title-test"

    assert await aretry_until(titled, 60, what="the fake agent's title")
    snap = await pane.snapshot()
    assert snap.alive
    assert (await pane.info()).title == "poli-title-test"
    await pane.kill()


# --- the tracker ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _snap(*lines: str) -> Snapshot:
    return Snapshot(lines)


def test_ready_latches_until_input_is_sent() -> None:
    clock = Clock()
    prof = _profile(ready=["^> ?$"], busy=["working"])
    tr = StateTracker(prof, clock=clock)
    assert tr.update(_snap("booting")).state is AgentState.UNKNOWN
    assert tr.update(_snap("> ")).state is AgentState.READY
    ready_since = tr.ready_since
    for frame in ("redraw 1", "", "redraw 2"):  # redraws hide the prompt: no flapping
        clock.now += 0.1
        reading = tr.update(_snap(frame))
        assert reading.state is AgentState.READY
        assert "latched" in reading.evidence[-1]
    assert tr.ready_since == ready_since
    tr.input_sent()
    assert tr.state is AgentState.UNKNOWN and not tr.busy_seen
    assert tr.update(_snap("redraw 3")).state is AgentState.UNKNOWN
    assert tr.update(_snap("working")).state is AgentState.BUSY
    assert tr.busy_seen
    clock.now += 1
    assert tr.update(_snap("> ")).state is AgentState.READY
    assert tr.ready_since == clock.now


def test_a_sure_reading_ends_the_latch() -> None:
    tr = StateTracker(_profile(ready=["^> ?$"], busy=["working"]), clock=Clock())
    tr.update(_snap("> "))
    assert tr.update(_snap("working")).state is AgentState.BUSY
    assert tr.update(_snap("redraw")).state is AgentState.UNKNOWN


def test_stuck_when_nothing_progresses() -> None:
    clock = Clock()
    prof = AgentProfile(
        name="t",
        stuck_after=60,
        detectors=Detectors(ready=["^> ?$"], busy=["esc to interrupt"], progress_ignore=["^[✻✽] "]),
    )
    tr = StateTracker(prof, clock=clock)
    tr.input_sent()
    spinner = ("✻", "✽")
    for i in range(12):  # 110 s of a spinning spinner and a ticking timer, nothing else
        clock.now += 10
        lines = ("❯ task", f"{spinner[i % 2]} Thinking… ({i * 10}s)", "esc to interrupt")
        reading = tr.update(_snap(*lines))
        if i < 5:
            assert reading.state is AgentState.BUSY, i
    assert reading.state is AgentState.STUCK
    assert reading.evidence[0].startswith("no progress for ")
    assert "esc to interrupt" in reading.evidence
    # Progress (a new line of output) ends it.
    clock.now += 1
    assert tr.update(_snap("❯ task", "● a reply line", "esc to interrupt")).state is AgentState.BUSY


def test_ready_and_waiting_agents_are_never_stuck() -> None:
    clock = Clock()
    prof = AgentProfile(
        name="t", stuck_after=5, detectors=Detectors(ready=["^> ?$"], approval=["Proceed\\?"])
    )
    tr = StateTracker(prof, clock=clock)
    tr.update(_snap("> "))
    clock.now += 100
    assert tr.update(_snap("> ")).state is AgentState.READY
    tr.update(_snap("Proceed?"))
    clock.now += 100
    assert tr.update(_snap("Proceed?")).state is AgentState.WAITING_APPROVAL


def test_quiescence_makes_a_quiet_unknown_screen_ready() -> None:
    clock = Clock()
    tr = StateTracker(AgentProfile(name="g", quiescence=2.0), clock=clock)
    assert tr.update(_snap("output")).state is AgentState.UNKNOWN
    clock.now += 1
    assert tr.update(_snap("more output")).state is AgentState.UNKNOWN
    clock.now += 1.5
    assert tr.update(_snap("more output")).state is AgentState.UNKNOWN
    clock.now += 1
    reading = tr.update(_snap("more output"))
    assert reading.state is AgentState.READY
    assert reading.rule == "quiet for 2s"


# --- approval policy ------------------------------------------------------------------------


class PolicyCase(t.NamedTuple):
    test_id: str
    mode: str
    patterns: tuple[str, ...]
    command: str
    decision: Decision | None


POLICY_CASES = [
    PolicyCase("ask", "ask", (), "ls", None),
    PolicyCase("approve-all", "approve", (), "rm -rf build", Decision.APPROVE),
    PolicyCase("deny-all", "deny", (), "echo hi", Decision.DENY),
    PolicyCase("pattern-approves", "deny", (r"^echo ", r"^ls\b"), "echo hi", Decision.APPROVE),
    PolicyCase("pattern-misses-deny", "deny", (r"^echo ",), "curl x | sh", Decision.DENY),
    PolicyCase("pattern-misses-ask", "ask", (r"^echo ",), "curl x | sh", None),
    PolicyCase("no-command-no-pattern", "deny", (r".*",), "", Decision.DENY),
]  # fmt: skip


@pytest.mark.parametrize("case", POLICY_CASES, ids=[c.test_id for c in POLICY_CASES])
def test_policy(case: PolicyCase) -> None:
    policy = ApprovalPolicy.of(case.mode, case.patterns)
    verdict = policy.decide(ApprovalRequest("Bash", case.command, ("Do you want to proceed?",)))
    assert verdict.decision is case.decision
    assert verdict.reason


# --- approval policy through the router, on the fake agent ----------------------------------

APPROVAL_RULE = (
    'approval = "Bash(echo hi > out.txt)"\n'
    'write_file = { path = "out.txt", content = "hi\\n" }\n'
    f"deny_reply = '''{block('PLANNER', 'result', 'Not run: denied.', tag='RESULT')}'''\n"
)
EXECUTER_ASKS = EXECUTER_HEAD + rule(r"\AYou received a PLANNER plan block:", RESULT, APPROVAL_RULE)


def _socket(server: libtmux.Server) -> str:
    assert server.socket_name is not None
    return server.socket_name


class ApprovalCase(t.NamedTuple):
    test_id: str
    routing: str
    approved: bool


APPROVAL_CASES = [
    ApprovalCase("approve-all", 'approval = "approve"', True),
    ApprovalCase("deny-all", 'approval = "deny"', False),
    ApprovalCase("by-pattern", 'approval = "deny"\napproval_patterns = ["^echo hi "]', True),
    ApprovalCase("pattern-misses", 'approval = "deny"\napproval_patterns = ["^rm "]', False),
]


@pytest.mark.parametrize("case", APPROVAL_CASES, ids=[c.test_id for c in APPROVAL_CASES])
async def test_router_applies_approval_policy(
    server: libtmux.Server, tmp_path: pathlib.Path, case: ApprovalCase
) -> None:
    root = tmp_path / "proj"
    write_project(
        root, _socket(server), planner=PLANNER_OK, executer=EXECUTER_ASKS,
        extra=f"[routing]\n{case.routing}\n",
    )  # fmt: skip
    loop = open_loop(root)
    try:
        await loop.session.up()
        task = await run_task(loop.config, loop.store, "Run the echo", timeout=60)
        assert task.state is TaskState.DONE, task.error
        decisions = [e for e in loop.log("EXECUTER") if e["event"] == "approval"]
        assert [(d["command"], d["approved"]) for d in decisions] == [
            ("echo hi > out.txt", case.approved)
        ]
        assert (root / "executer" / "out.txt").exists() is case.approved
        events = [e for e in loop.store.list_events(limit=500) if e.kind == "approval"]
        assert len(events) == 1
        event = events[0]
        assert event.agent == "EXECUTER" and event.task_id == task.id
        assert event.data["decision"] == ("approve" if case.approved else "deny")
        assert event.data["by"] == "policy"
        assert event.data["command"] == "echo hi > out.txt"
        assert any("Would you like to run" in line for line in event.data["evidence"])
        assert "Not run: denied." in (loop.prompts("PLANNER")[-1]) or case.approved
    finally:
        await loop.session.down()
        await loop.session.host.server.close()
        loop.store.close()


async def test_router_asks_the_user_and_applies_poli_approve(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    import asyncio

    from politerm.status import collect

    root = tmp_path / "proj"
    write_project(root, _socket(server), planner=PLANNER_OK, executer=EXECUTER_ASKS)
    loop = open_loop(root)
    assert loop.config.routing.approval == "ask"
    try:
        await loop.session.up()
        with pytest.raises(RoutingError, match="no approval question waiting"):
            answer_pending(loop.store, "EXECUTER", Decision.APPROVE)
        runner = asyncio.create_task(run_task(loop.config, loop.store, "Run the echo", timeout=60))

        async def asked() -> bool:
            return get_pending(loop.store, "EXECUTER") is not None

        assert await aretry_until(asked, 60, what="the approval question")
        status = collect(loop.store)
        [question] = status["approvals"]
        assert question["agent"] == "EXECUTER" and question["command"] == "echo hi > out.txt"
        assert question["answer"] is None
        # Nothing is answered while the user has not: the fake agent logged no decision.
        await asyncio.sleep(0.5)
        assert not [e for e in loop.log("EXECUTER") if e["event"] == "approval"]
        answer_pending(loop.store, "EXECUTER", Decision.APPROVE)
        task = await runner
        assert task.state is TaskState.DONE, task.error
        assert (root / "executer" / "out.txt").read_text() == "hi\n"
        assert get_pending(loop.store, "EXECUTER") is None
        kinds = [e.kind for e in loop.store.list_events(limit=500)]
        assert kinds.index("approval-asked") < kinds.index("approval-answer")
        assert kinds.index("approval-answer") < kinds.index("approval")
        [event] = [e for e in loop.store.list_events(limit=500) if e.kind == "approval"]
        assert event.data["by"] == "user" and event.data["decision"] == "approve"
        log = read_log(root / "executer.jsonl")
        assert [e["approved"] for e in log if e["event"] == "approval"] == [True]
    finally:
        await loop.session.down()
        await loop.session.host.server.close()
        loop.store.close()


async def test_a_wrapped_row_above_the_prompt_keeps_the_cursor_on_it(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # aider (the cursor must be on its prompt) sat ready at "diff> " while a line of its
    # prompt's echo, wider than the pane, stayed wrapped on the screen: tmux's capture
    # joins the two rows, the cursor's row named the line below the prompt, and the
    # router read "busy: cursor off the prompt" until the task timed out (issue 23's
    # ask+patterns loop, 2 of 13 runs).
    from politerm.tmux.pane import new_window

    (tmp_path / "wide").write_text("- " + "x" * 300 + "\n")
    wide, go = shlex.quote(str(tmp_path / "wide")), shlex.quote(str(tmp_path / "go"))
    script = (
        f"cat {wide}; printf 'diff> '; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; printf '\\nRunning it\\n'; exec sleep 600"
    )
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="wrap", argv=["sh", "-c", script],
        size=(200, 20),
    )  # fmt: skip
    aider = load_profile("aider")
    try:

        async def at_prompt() -> bool:
            return (await pane.snapshot()).cursor_x == len("diff> ")

        await aretry_until(at_prompt, 30, what="the pane to show its prompt")
        snap = await pane.snapshot()
        assert len(snap.lines) == snap.rows - 1  # the wide line's two rows joined into one
        assert snap.lines[snap.cursor_line].rstrip() == "diff>"
        reading = aider.detect(snap)
        assert (reading.state, reading.input_text) == (AgentState.READY, ""), reading
        # Working (the cursor left the prompt) still reads busy.
        (tmp_path / "go").touch()

        async def working() -> bool:
            return aider.detect(await pane.snapshot()).state is AgentState.BUSY

        await aretry_until(working, 30, what="the cursor to leave the prompt")
    finally:
        await pane.kill()
