"""Delivery with confirmation into the fake agent TUIs running in a private tmux server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import pathlib
import sys
import typing as t

import psutil
import pytest

from politerm.agents import AgentState, load_profile
from politerm.driver.delivery import Outcome, clear_input, deliver
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    from politerm.agents import AgentProfile
    from politerm.driver.delivery import DeliveryResult
    from politerm.tmux import ControlClient, Pane, TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent"]
START_SECONDS = 15.0  # python start-up on a loaded 2-core box
DELIVER_SECONDS = 30.0  # far above the slowest outcome (STRANDED after every retry)


@dataclasses.dataclass
class Agent:
    """A fake agent in a window of session ``t``: its pane, profile, log and directories."""

    pane: Pane
    profile: AgentProfile
    log: pathlib.Path
    cwd: pathlib.Path
    home: pathlib.Path

    def events(self, kind: str | None = None) -> list[dict[str, t.Any]]:
        if not self.log.exists():
            return []
        return [e for e in read_log(self.log) if kind is None or e["event"] == kind]

    def prompts(self) -> list[bytes]:
        return prompts(self.log) if self.log.exists() else []

    def canaries(self) -> list[pathlib.Path]:
        return [*self.cwd.glob("CANARY*"), *self.home.glob("CANARY*")]


async def start_agent(
    client: ControlClient,
    server: TmuxServer,
    tmp_path: pathlib.Path,
    mode: str,
    scenario: str = "think_time = 0.2\n",
    *,
    extra: t.Sequence[str] = (),
    name: str = "fa",
) -> Agent:
    """Start the fake agent in ``mode`` and wait (bounded) until its profile reads READY."""
    cwd = tmp_path / f"{name}-cwd"
    cwd.mkdir()
    home = pathlib.Path(os.environ["HOME"])
    scenario_file = tmp_path / f"{name}-scenario.toml"
    scenario_file.write_text(scenario, "utf-8")
    log = tmp_path / f"{name}.jsonl"
    argv = [*FAKE, "--mode", mode, "--scenario", str(scenario_file), "--log", str(log), *extra]
    pane = await new_window(
        client, server, session="t", name=name, argv=argv, cwd=cwd, env={"HOME": str(home)}
    )
    agent = Agent(pane, load_profile(f"fake-{mode}"), log, cwd, home)

    async def ready() -> bool:
        if not agent.events("start"):
            return False
        return agent.profile.detect(await pane.snapshot()).state is AgentState.READY

    await aretry_until(ready, START_SECONDS, what=f"the fake {mode} agent to be READY")
    return agent


async def send(agent: Agent, data: bytes, profile: AgentProfile | None = None) -> DeliveryResult:
    """``deliver`` with a hard bound, so a delivery that never decides fails the test."""
    async with asyncio.timeout(DELIVER_SECONDS):
        return await deliver(agent.pane, data, profile or agent.profile)


# --- delivery into every mode -----------------------------------------------------------


class ModeCase(t.NamedTuple):
    test_id: str
    mode: str
    extra: tuple[str, ...] = ()


MODES = [
    ModeCase("claude", "claude"),
    ModeCase("codex", "codex"),
    ModeCase("codex-inline", "codex", ("--no-alt-screen",)),
    ModeCase("gemini", "gemini"),
    ModeCase("plain", "plain"),
]


def _one_mib() -> bytes:
    # base64 lines of random bytes: printable, 76 columns, and a new text every run.
    return base64.encodebytes(os.urandom(800_000))[: 1 << 20]


class TextCase(t.NamedTuple):
    test_id: str
    data: bytes
    # What the agent must receive when it differs from ``data``.
    received: bytes | None = None


PASTE_END = b"\x1b[201~"

TEXTS = [
    TextCase("one-line", b"Summarise the README in one sentence."),
    TextCase("multi-line", b"first line\nsecond line\n\n    indented fourth\n\tTAB fifth\nlast"),
    TextCase("one-mib", _one_mib()),
    TextCase("tmux-key-names", b"C-c Enter Escape\nEnter\nC-c\nEscape C-d Tab BSpace M-x"),
    TextCase(
        "shell-metachars",
        b"$(touch CANARY) ; touch CANARY2 && `touch CANARY3` | tee CANARY4 & echo $HOME >CANARY5",
    ),
    TextCase("ansi-escapes", b"\x1b[31mred\x1b[0m then \x1b[2J\x1b[H and \x1b]0;title\x07 done"),
    TextCase("slash-command", b"/quit"),
    TextCase("slash-and-at-lines", b"/quit\n@file src/politerm/cli.py\n/exit\n@@ -1 +1 @@"),
    TextCase("unicode", "héllo wörld — ✓ 日本語 🎉 e\u0301 Ωμέγα".encode()),
    TextCase(
        "paste-end-marker",
        b"before " + PASTE_END + b"\x03C-c\r; touch CANARY6\rafter\n" + PASTE_END + b"tail",
        b"before [201~\x03C-c\r; touch CANARY6\rafter\n[201~tail",
    ),
]


@pytest.mark.parametrize("text", TEXTS, ids=[c.test_id for c in TEXTS])
@pytest.mark.parametrize("mode", MODES, ids=[c.test_id for c in MODES])
async def test_delivers_exact_bytes(
    tmux_session: ControlClient,
    tmux_server: TmuxServer,
    tmp_path: pathlib.Path,
    mode: ModeCase,
    text: TextCase,
) -> None:
    agent = await start_agent(tmux_session, tmux_server, tmp_path, mode.mode, extra=mode.extra)
    result = await send(agent, text.data)
    assert result.outcome is Outcome.DELIVERED, result
    assert result.submitted
    received = text.received if text.received is not None else text.data
    # One paste, one prompt, byte-exact: nothing in the text was taken as a key.
    assert agent.prompts() == [received]
    assert len(agent.events("paste")) == 1
    keys = [e["key"] for e in agent.events("key")]
    assert keys == ["enter"] * result.submits
    assert agent.canaries() == []
    assert await agent.pane.is_alive()


# --- swallowed Enter --------------------------------------------------------------------


class SwallowCase(t.NamedTuple):
    test_id: str
    mode: str
    scenario: str
    reason: str | None  # the swallowed_enter reason expected, None if none
    submit_delay: float | None = None  # override the profile's


SWALLOW_CASES = [
    SwallowCase(
        "gemini-after-paste", "gemini", "swallow_first_enter_after_paste = true\n", "after_paste"
    ),
    SwallowCase(
        "claude-after-paste", "claude", "swallow_first_enter_after_paste = true\n", "after_paste"
    ),
    # Enter in the same read() as typed text: delivery pastes and waits for the paste to
    # show, so even without a submit delay its Enter is never part of that burst.
    SwallowCase("codex-burst-read", "codex", "swallow_enter_in_burst = true\n", None, 0.0),
    # A burst that lasts a while after the paste (Codex's Enter suppression window):
    # with no submit delay the first Enter is swallowed, and the retry gets it through.
    SwallowCase(
        "codex-burst-window",
        "codex",
        "swallow_enter_in_burst = true\nburst_window = 0.4\n",
        "burst",
        0.0,
    ),
]


@pytest.mark.parametrize("case", SWALLOW_CASES, ids=[c.test_id for c in SWALLOW_CASES])
async def test_swallowed_enter_is_retried(
    tmux_session: ControlClient,
    tmux_server: TmuxServer,
    tmp_path: pathlib.Path,
    case: SwallowCase,
) -> None:
    agent = await start_agent(tmux_session, tmux_server, tmp_path, case.mode, case.scenario)
    profile = agent.profile
    if case.submit_delay is not None:
        profile = profile.model_copy(update={"submit_delay": case.submit_delay})
    data = b"first line\nsecond line"
    result = await send(agent, data, profile)
    assert result.outcome is Outcome.DELIVERED, result
    assert agent.prompts() == [data]
    swallowed = agent.events("swallowed_enter")
    if case.reason is None:
        assert swallowed == []
        assert result.submits == 1
    else:
        assert [e["reason"] for e in swallowed] == [case.reason]
        assert result.submits >= 2


async def test_stuck_input_is_stranded(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    agent = await start_agent(
        tmux_session, tmux_server, tmp_path, "claude", "swallow_all_enters = true\n"
    )
    result = await send(agent, b"never leaves the box")
    assert result.outcome is Outcome.STRANDED, result
    assert not result.submitted
    assert result.submits == agent.profile.submit_retries + 1
    # The evidence is the input box, still holding the text.
    assert any(
        agent.profile.is_input_line(line) and "never leaves the box" in line
        for line in result.evidence
    ), result.evidence
    assert agent.prompts() == []
    swallowed = agent.events("swallowed_enter")
    assert [e["reason"] for e in swallowed] == ["all"] * result.submits


async def test_a_before_submit_hook_that_raises_leaves_the_text_unsubmitted(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    # A fleet node re-checks its lease there: a node paused between its paste and the
    # submit key found its lease gone and must not submit (the 300-task fault run saw one).
    agent = await start_agent(tmux_session, tmux_server, tmp_path, "codex")
    asked: list[str] = []

    class Lost(Exception):
        pass

    async def lost() -> None:
        asked.append("before-submit")
        raise Lost

    with pytest.raises(Lost):
        async with asyncio.timeout(DELIVER_SECONDS):
            await deliver(
                agent.pane, b"typed under a lost lease", agent.profile, before_submit=lost
            )
    assert asked == ["before-submit"]
    assert [e["event"] for e in agent.events("paste")] == ["paste"]
    assert agent.prompts() == []  # pasted, never submitted


# --- approval, crash, kill --------------------------------------------------------------

APPROVAL_SCENARIO = """
think_time = 0.2
[[rules]]
match = 'please run'
think_time = 0
approval = "Bash(echo hi > out.txt)"
write_file = { path = "out.txt", content = "hi\\n" }
reply = "Done."
"""


class ApprovalCase(t.NamedTuple):
    test_id: str
    question: str


APPROVAL_CASES = [
    ApprovalCase("claude", "Do you want to proceed?"),
    ApprovalCase("codex", "Would you like to run the following command?"),
    ApprovalCase("gemini", "Allow execution of"),
]


@pytest.mark.parametrize("case", APPROVAL_CASES, ids=[c.test_id for c in APPROVAL_CASES])
async def test_approval_question_blocks(
    tmux_session: ControlClient,
    tmux_server: TmuxServer,
    tmp_path: pathlib.Path,
    case: ApprovalCase,
) -> None:
    agent = await start_agent(tmux_session, tmux_server, tmp_path, case.test_id, APPROVAL_SCENARIO)
    result = await send(agent, b"please run the greeting")
    assert result.outcome is Outcome.BLOCKED, result
    assert result.submitted
    assert any(case.question in line for line in result.evidence), result.evidence
    assert agent.prompts() == [b"please run the greeting"]
    pastes = len(agent.events("paste"))

    # While the question is up, nothing is pasted: the text would answer it.
    again = await send(agent, b"1\ny\n")
    assert again.outcome is Outcome.BLOCKED, again
    assert not again.submitted
    assert again.submits == 0
    assert any(case.question in line for line in again.evidence), again.evidence
    assert len(agent.events("paste")) == pastes
    assert [e["key"] for e in agent.events("key")] == ["enter"] * result.submits
    assert agent.events("approval") == []
    assert not (agent.cwd / "out.txt").exists()

    # Nor do the clear_input keys (ctrl-c), which a failed delivery presses before the next
    # try: they would dismiss the question (its options' row reads as text in the box).
    async with asyncio.timeout(DELIVER_SECONDS):
        snap = await clear_input(agent.pane, agent.profile)
    assert snap is not None
    assert any(case.question in line for line in snap.lines), snap.lines
    assert [e["key"] for e in agent.events("key")] == ["enter"] * result.submits
    assert agent.profile.detect(await agent.pane.snapshot()).state is AgentState.WAITING_APPROVAL


CRASH_SCENARIO = """
think_time = 0.2
[[rules]]
match = 'boom'
action = "crash"
"""


async def test_crashed_agent_is_agent_exited(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    agent = await start_agent(tmux_session, tmux_server, tmp_path, "claude", CRASH_SCENARIO)
    result = await send(agent, b"boom")
    assert result.outcome is Outcome.AGENT_EXITED, result
    assert result.submitted
    assert agent.prompts() == [b"boom"]
    assert [e["event"] for e in agent.events()][-1] == "crash"

    # Into the dead pane: nothing is tried.
    dead = await send(agent, b"anyone there?")
    assert dead.outcome is Outcome.AGENT_EXITED, dead
    assert (dead.submits, dead.submitted) == (0, False)
    assert agent.prompts() == [b"boom"]

    # And into a pane that no longer exists.
    await agent.pane.kill(grace=1.0)
    gone = await send(agent, b"hello?")
    assert gone.outcome is Outcome.AGENT_EXITED, gone
    assert gone.evidence == ("pane is gone",)


async def test_kill_leaves_no_process_of_the_tree(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    # The child ignores SIGTERM as well as the SIGHUP it inherits: only SIGKILL ends it.
    scenario = (
        "ignore_sighup = true\nspawn_child = true\n"
        'child_command = ["sh", "-c", "trap \'\' TERM; sleep 600 & wait"]\n'
    )
    agent = await start_agent(tmux_session, tmux_server, tmp_path, "gemini", scenario)
    (start,) = agent.events("start")
    root = psutil.Process(start["pid"])

    async def tree() -> list[psutil.Process]:
        procs = [root, *root.children(recursive=True)]
        pids = {p.pid for p in procs}
        # the fake, its child (sh) and the child's sleep
        return procs if start["child_pid"] in pids and len(procs) >= 3 else []

    procs = await aretry_until(tree, 60, what="the fake agent's child and grandchild")
    try:
        await agent.pane.kill(grace=1.0)
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert alive == []
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
