"""The agent driver on real fake agents: start, deliver, turns, approvals, idle, kill."""

from __future__ import annotations

import asyncio
import pathlib
import sys
import typing as t

import psutil
import pytest

from politerm.agents import load_profile
from politerm.agents.approval import ApprovalPolicy, Decision, answer_pending, get_pending
from politerm.agents.state import AgentState
from politerm.driver import AgentDriver, Expect, Host, TurnOutcome
from politerm.errors import AgentNotFound
from politerm.store import RunStore
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import Pane

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent"]
READY = 30.0  # python start-up on a loaded 2-core box
TURN = 60.0  # every turn test bounds its own run with this

DONE_RULE = """
[[rules]]
match = '(?s)DO (?P<id>\\S+) nonce=(?P<nonce>[0-9a-f]+)'
{extra}reply = '''
Working on it.

```
[[POLI:MSG {{"to":"ORCH","type":"done","id":"{{id}}","nonce":"{{nonce}}"}}]]
<REPORT>
Did {{id}}.
</REPORT>
[[/POLI:MSG]]
```
'''
"""


def scenario(tmp_path: pathlib.Path, body: str, name: str = "fa") -> list[str]:
    """The fake agent's argv with ``body`` as its scenario; it logs to ``<name>.jsonl``."""
    path = tmp_path / f"{name}.toml"
    path.write_text(body, "utf-8")
    return [*FAKE, "--mode", "claude", "--scenario", str(path), "--log", str(tmp_path / name)]


def logged(tmp_path: pathlib.Path, name: str = "fa") -> list[bytes]:
    return prompts(tmp_path / name)


async def start(
    tmux_server: TmuxServer,
    client: ControlClient,
    tmp_path: pathlib.Path,
    body: str,
    **kwargs: t.Any,
) -> AgentDriver:
    return await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=scenario(tmp_path, body),
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        **kwargs,
    )


def prompt(task: str) -> t.Callable[[str], str]:
    return lambda nonce: f"DO {task} nonce={nonce}"


async def test_turn_on_tmux_answered_with_the_block(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    driver = await start(tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""))
    async with asyncio.timeout(TURN):
        result = await driver.run_turn(
            prompt("T1"), Expect.block("done", block_id="T1"), timeout=30
        )
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.block is not None and result.block.body.strip() == "Did T1."
    assert result.block.nonce == result.nonce
    assert result.delivery is not None and result.delivery.ok
    assert logged(tmp_path) == [f"DO T1 nonce={result.nonce}".encode()]
    pid = await driver.pid()
    assert pid is not None
    assert driver.live_view(fields=list, on_interrupt=print) is None  # attached with tmux
    await driver.kill()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_turn_on_a_pty(tmp_path: pathlib.Path) -> None:
    driver = await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=scenario(tmp_path, DONE_RULE.format(extra="")),
        cwd=tmp_path,
        ready_timeout=READY,
    )
    try:
        async with asyncio.timeout(TURN):
            result = await driver.run_turn(prompt("P1"), Expect.block("done"), timeout=30)
        assert result.outcome is TurnOutcome.ANSWERED, result.error
        assert result.block is not None and result.block.id == "P1"
        assert driver.host_gone() is None  # a PTY has no host to lose
        assert driver.live_view(fields=list, on_interrupt=print) is not None  # poli go's view
        pid = await driver.pid()
        assert pid is not None and psutil.Process(pid).is_running()
    finally:
        await driver.kill()
    assert driver.dead
    assert await driver.pid() is None


async def test_an_agent_taken_as_exited_has_its_row_say_so(tmp_path: pathlib.Path) -> None:
    # The router learns of a death from a delivery; the row is the driver's to write.
    store = RunStore.open(tmp_path / "store.db")
    store.upsert_agent(
        "AGENT",
        session="s",
        pane_id="pty",
        command="fake",
        cwd="/",
        profile="fake-claude",
        resume_command=None,
    )
    driver = await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=scenario(tmp_path, DONE_RULE.format(extra="")),
        cwd=tmp_path,
        ready_timeout=READY,
        store=store,
    )
    try:
        assert store.get_agent("AGENT").state == "ready"  # type: ignore[union-attr]
        driver.mark_exited()
        assert driver.dead
        assert store.get_agent("AGENT").state == "exited"  # type: ignore[union-attr]
    finally:
        await driver.kill()
        store.close()


async def test_missing_program_creates_nothing(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    before = await tmux_session.cmd("list-windows", "-t", "=t", "-F", "#{window_id}")
    with pytest.raises(AgentNotFound) as err:
        await AgentDriver.start(
            "PLANNER",
            load_profile("claude"),
            argv=["no-such-claude-binary"],
            host=Host(tmux_server, "t"),
            window="planner",
        )
    assert str(err.value) == (
        "cannot start 'no-such-claude-binary': not on PATH; install it or set "
        "agents.PLANNER.command"
    )
    after = await tmux_session.cmd("list-windows", "-t", "=t", "-F", "#{window_id}")
    assert after == before


async def test_missing_working_directory_creates_nothing_on_either_backend(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # tmux would silently start the agent elsewhere; a PTY's child would die after the fork.
    gone = tmp_path / "no-such-dir"
    before = await tmux_session.cmd("list-windows", "-t", "=t", "-F", "#{window_id}")
    for host in [Host(tmux_server, "t"), None]:
        with pytest.raises(AgentNotFound) as err:
            await AgentDriver.start(
                "PLANNER", load_profile("shell"), argv=["sh"], host=host, cwd=gone
            )
        assert str(err.value) == (
            f"cannot start 'sh' in {gone}: not a directory; create it or set agents.PLANNER.cwd"
        )
    after = await tmux_session.cmd("list-windows", "-t", "=t", "-F", "#{window_id}")
    assert after == before


async def test_agent_that_never_gets_ready_is_torn_down(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    from politerm.errors import AgentTimeout

    with pytest.raises(AgentTimeout, match="not ready after 1s"):
        await AgentDriver.start(
            "AGENT",
            load_profile("fake-claude"),
            argv=["sleep", "612.25"],  # a number no other process on the box uses
            host=Host(tmux_server, "t"),
            window="sleeper",
            ready_timeout=1.0,
        )
    names = await tmux_session.cmd(
        "list-panes", "-s", "-t", "=t", "-F", "#{pane_dead} #{@poli_agent}"
    )
    assert all(not line.endswith("AGENT") or line.startswith("1") for line in names)
    procs = psutil.process_iter(["cmdline"])
    assert not [p for p in procs if p.info["cmdline"] == ["sleep", "612.25"]]


async def test_text_left_in_the_box_is_cleared_before_the_paste(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    driver = await start(tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""))
    # A person (or a dead-lettered prompt) left text in the input box.
    pane = Pane(tmux_session, driver.terminal_name, tmux_server)
    await pane.paste(b"half-typed words of someone else")
    await aretry_until(lambda: _box(driver), 10, what="the left-over text to show in the input box")
    async with asyncio.timeout(TURN):
        result = await driver.run_turn(prompt("T2"), Expect.block("done"), timeout=30)
    assert result.ok, result.error
    # Exactly one prompt was submitted, and it is ours alone: nothing merged into it.
    assert logged(tmp_path) == [f"DO T2 nonce={result.nonce}".encode()]


async def test_a_turn_resumed_after_its_watcher_died_reads_the_answer_once(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # A pipeline step's runner was killed after its prompt went in: a new driver on the
    # same pane only watches (no second prompt) and reads the answer from the line recorded.
    first = await start(tmux_server, tmux_session, tmp_path, DONE_RULE.format(extra=""))
    snap = await first.snapshot()
    assert snap is not None
    begin = first.turn_start(snap)
    nonce = "0123456789abcdef"
    sent = await first.deliver(f"DO R1 nonce={nonce}")
    assert sent.ok, sent.evidence
    pane = Pane(tmux_session, first.terminal_name, tmux_server)
    again = AgentDriver("AGENT", load_profile("fake-claude"), pane, cwd=tmp_path)
    async with asyncio.timeout(TURN):
        result = await again.run_turn(
            "never sent",
            Expect.block("done", block_id="R1"),
            timeout=30,
            nonce=nonce,
            start=begin,
            resumed="delivered",
        )
    assert result.outcome is TurnOutcome.ANSWERED, result.error
    assert result.delivery is None and result.block is not None and result.block.id == "R1"
    assert logged(tmp_path) == [f"DO R1 nonce={nonce}".encode()]
    await again.kill()


async def _box(driver: AgentDriver) -> bool:
    snap = await driver.snapshot()
    return snap is not None and bool(driver.profile.input_text(snap))


async def test_idle_without_answer_is_nudged_then_fails(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    driver = await start(tmux_server, tmux_session, tmp_path, 'default_reply = "I did it."\n')
    async with asyncio.timeout(TURN):
        result = await driver.run_turn(
            prompt("T3"), Expect.block("done"), timeout=120, idle_after=1.0, nudges=1
        )
    assert result.outcome is TurnOutcome.IDLE
    assert result.nudges == 1
    assert "went idle without a done block" in result.error
    assert "1 nudge(s) delivered" in result.error
    sent = logged(tmp_path)
    assert len(sent) == 2 and sent[1].startswith(b"If you are finished")


APPROVAL = DONE_RULE.format(extra='approval = "Bash(echo hi > out.txt)"\n')


async def test_approval_answered_by_policy(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "store.db")
    driver = await start(
        tmux_server,
        tmux_session,
        tmp_path,
        APPROVAL,
        store=store,
        policy=ApprovalPolicy.of("deny", [r"^echo hi"]),
    )
    async with asyncio.timeout(TURN):
        result = await driver.run_turn(prompt("T4"), Expect.block("done"), timeout=30)
    assert result.ok, result.error
    [event] = [e for e in store.list_events() if e.kind == "approval"]
    assert event.data["decision"] == "approve" and event.data["by"] == "policy"
    assert [e["event"] for e in read_log(tmp_path / "fa") if e["event"] == "approval"] != []
    store.close()


async def test_approval_answered_with_poli_approve(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "store.db")
    driver = await start(
        tmux_server,
        tmux_session,
        tmp_path,
        APPROVAL,
        store=store,
        approval_key="run1.step-1",
    )
    turn = asyncio.create_task(driver.run_turn(prompt("T5"), Expect.block("done"), timeout=60))

    async def asked() -> bool:
        return get_pending(store, "run1.step-1") is not None

    await aretry_until(asked, 60, what="the approval question to be pending")
    assert not turn.done()
    answer_pending(store, "run1.step-1", Decision.APPROVE)
    async with asyncio.timeout(TURN):
        result = await turn
    assert result.ok, result.error
    [event] = [e for e in store.list_events() if e.kind == "approval"]
    assert event.data["by"] == "user" and event.agent == "run1.step-1"
    assert get_pending(store, "run1.step-1") is None
    store.close()


async def test_a_users_answer_whose_keys_were_lost_is_pressed_again_not_asked_again(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # The agent drops the keys of the first answer (a CLI that reads them before its
    # question listens): the question stays on screen past HOLD. The user already answered
    # it; it is not asked again (CI: opencode's re-asked question was never answered).
    store = RunStore.open(tmp_path / "store.db")
    body = APPROVAL + "\n[faults]\nlose_answers = 1\n"
    driver = await start(tmux_server, tmux_session, tmp_path, body, store=store)
    turn = asyncio.create_task(driver.run_turn(prompt("T8"), Expect.block("done"), timeout=30))

    async def asked() -> bool:
        return get_pending(store, "AGENT") is not None

    await aretry_until(asked, 60, what="the approval question to be pending")
    answer_pending(store, "AGENT", Decision.APPROVE)
    async with asyncio.timeout(TURN):
        result = await turn
    assert result.ok, result.error
    events = store.list_events()
    assert len([e for e in events if e.kind == "approval-asked"]) == 1, events
    pressed = [e.data for e in events if e.kind == "approval"]
    assert [(d["decision"], d["by"]) for d in pressed] == [("approve", "user")] * 2, pressed
    log = read_log(tmp_path / "fa")
    assert [e["kind"] for e in log if e["event"] == "fault"] == ["lost_answer"]
    assert [e["approved"] for e in log if e["event"] == "approval"] == [True]
    store.close()


async def test_two_looks_at_one_agent_answer_its_question_once(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # The router's step and a message lane look at one agent through its one driver (one
    # owner per agent) at the same moment: the keys are pressed once (a second press would
    # land on the agent's next screen).
    store = RunStore.open(tmp_path / "store.db")
    approve = ApprovalPolicy.of("approve", [])
    driver = await start(tmux_server, tmux_session, tmp_path, APPROVAL, store=store, policy=approve)
    result = await driver.deliver("DO T6 nonce=abc123")
    assert result.got_in, result

    async def asked() -> bool:
        snap = await driver.snapshot()
        return snap is not None and driver.profile.detect(snap).state is AgentState.WAITING_APPROVAL

    await aretry_until(asked, 30, what="the approval question")
    await asyncio.gather(driver.observe(), driver.observe())

    async def answered() -> bool:
        return any(e["event"] == "reply" for e in read_log(tmp_path / "fa"))

    await aretry_until(answered, 30, what="the agent's reply after the approval")
    assert len([e for e in store.list_events() if e.kind == "approval"]) == 1
    events = [e["event"] for e in read_log(tmp_path / "fa")]
    assert events.count("approval") == 1, events
    after = events[events.index("approval") :]
    assert "key" not in after, events  # no second answer reached the agent
    store.close()


async def test_turn_window_counts_rows_like_the_capture(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    """A long line that tmux wrapped above the turn start must not shift the window."""
    script = tmp_path / "printer.py"
    script.write_text(
        "import sys\n"
        "print('x' * 700, flush=True)\n"  # several rows, one line once joined
        "sys.stdin.readline()\n"
        'print(\'[[POLI:MSG {"to":"ORCH","type":"done","id":"W1","nonce":"abc123"}]]\')\n'
        "print('ok')\n"
        "print('[[/POLI:MSG]]', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    driver = await AgentDriver.start(
        "PRINTER",
        load_profile("generic"),
        argv=[sys.executable, str(script)],
        host=Host(tmux_server, "t"),
        window="printer",
        size=(80, 24),
        ready_timeout=None,
    )

    async def printed() -> bool:
        snap = await driver.snapshot()
        return snap is not None and any("xxxx" in ln for ln in snap.lines)

    await aretry_until(printed, 60, what="the long line")
    snap = await driver.snapshot()
    assert snap is not None
    start = driver.turn_start(snap)
    await driver.press("Enter")

    async def answered() -> bool:
        snap = await driver.snapshot()
        assert snap is not None
        blocks = await driver.read_blocks(snap, start, "abc123")
        return any(b.id == "W1" for b in blocks)

    await aretry_until(answered, 60, what="the block below the wrapped line")
    await driver.kill()


def test_hook_points_are_checked() -> None:
    driver = AgentDriver.__new__(AgentDriver)  # the point is checked before anything else

    async def nothing() -> None:
        return None

    with pytest.raises(ValueError, match="no hook point 'sometime'"):
        driver.on("sometime", nothing)


def test_os_path_is_used_for_the_check() -> None:
    from politerm.driver import check_program

    check_program(
        [pathlib.Path(sys.executable).name],
        {"PATH": str(pathlib.Path(sys.executable).parent)},
        setting="x",
    )
