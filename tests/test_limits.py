"""Usage and rate limits: detectors and reset times, the tracker, and a LIMITED turn resumed.

The turn tests drive the bundled fake agent in a real tmux pane: its first answer is a
limit message, the driver waits for the reset and sends "continue", and the answer to that
ends the turn.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import pathlib
import sys
import typing as t

import pytest

from politerm.agents import AgentState, StateTracker, load_profile
from politerm.agents.limits import parse_reset, reset_time
from politerm.driver import AgentDriver, Expect, Host, LimitPolicy, TurnOutcome
from politerm.protocol.usage import Usage
from politerm.store import RunStore
from politerm.terminal import Snapshot
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from politerm.protocol.usage import Entries
    from politerm.tmux import ControlClient, TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent"]
READY = 60.0
BOX = ("─" * 40, "❯ ", "─" * 40, "  ? for shortcuts")
# What sits under the message on each CLI's screen when it waits for input.
BOXES = {
    "claude": BOX,
    "codex": ("› Ask Codex to do anything", "  ← for agents · ? for shortcuts"),
    "gemini": (" >   Type your message or @path/to/file", " workspace (/directory)  sandbox"),
    "aider": ("─" * 40, "> "),
    "opencode": ("┃", "┃  Build  Mock Model", "ctrl+p commands"),
}


class Case(t.NamedTuple):
    test_id: str
    profile: str
    line: str
    resets_in: float | None  # seconds from now, None: the screen does not say


NOW = 1_800_000_000.0
CASES = [
    Case(
        "claude-429",
        "claude",
        "● API Error: Request rejected (429) · This request would exceed your account's rate "
        "limit. Please try again later.",
        None,
    ),
    Case(
        "claude-usage", "claude", "● Claude usage limit reached. Please try again in 2 hours.", 7200
    ),
    Case(
        "codex-usage",
        "codex",
        "■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
        "https://chatgpt.com/settings/usage to purchase more credits or try again in 1 hour "
        "30 minutes.",
        5400,
    ),
    Case(
        "gemini-quota",
        "gemini",
        "✕ [API Error: You exceeded your current quota. Please retry in 42s.]",
        42,
    ),
    Case(
        "aider-rate", "aider", "litellm.RateLimitError: rate limit exceeded; try again in 20s", 20
    ),
    Case("opencode-429", "opencode", "     Too Many Requests: rate limit reached", None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_limit_screens_read_limited_with_their_reset(case: Case) -> None:
    prof = load_profile(case.profile)
    lines = (case.line, *BOXES[case.profile])
    snap = Snapshot(lines, cursor_x=2, cursor_y=len(lines) - 1)
    reading = prof.detect(snap)
    assert reading.state is AgentState.LIMITED, reading
    assert case.line.strip() in reading.evidence[0]
    text = prof.region(snap)
    at = reset_time(prof, text, now=NOW)
    if case.resets_in is None:
        assert at is None and reading.reset_at is None
    else:
        assert at == pytest.approx(NOW + case.resets_in, abs=1)


def test_a_cli_retrying_by_itself_is_busy_not_limited() -> None:
    prof = load_profile("claude")
    lines = ("  ⎿  API Error: 429 rate_limit_error · Retrying in 3s", "", "  esc to interrupt")
    assert prof.detect(Snapshot(lines)).state is AgentState.BUSY
    status = (
        "   ⬝⬝⬝⬝⬝■■■ Rate limit reached for requests on mock-model. Please try again in 120s. "
        "[retrying in 1m 58s attempt #1]"
    )
    assert load_profile("opencode").detect(Snapshot((*OPENCODE_BOX, status))).state is (
        AgentState.BUSY
    )


# opencode 1.18.33 after it gave up on a 429 (recorded): the error ends the session view,
# far above the input box.
OPENCODE_BOX = (
    "  ┃",
    "  ┃  Build · Mock Model Mock LLM",
    "  ╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀",
)
OPENCODE_GAVE_UP = (
    "  ┃",
    "  ┃  Say hi LIMITME",
    "  ┃",
    "  ┃",
    "  ┃  Rate limit reached for requests on mock-model. Please try again in 3s.",
    "  ┃",
    "     ▣  Build · Mock Model",
    *([""] * 30),
    *OPENCODE_BOX,
    "   /work/proj                                      tab agents  ctrl+p commands",
)


def test_opencode_error_far_above_the_input_box_reads_limited() -> None:
    prof = load_profile("opencode")
    reading = prof.detect(Snapshot(OPENCODE_GAVE_UP))
    assert reading.state is AgentState.LIMITED, reading
    assert reading.reset_at is not None


def test_clock_reset_names_the_next_such_time_in_its_zone() -> None:
    now = dt.datetime(2026, 11, 23, 23, 30, tzinfo=dt.UTC)
    when = parse_reset("resets 1am (Europe/Berlin)", now)
    # 23:30 UTC is 00:30 in Berlin: 1am there is half an hour away.
    assert when is not None and when - now == dt.timedelta(minutes=30)


def test_tracker_counts_only_a_limit_message_after_the_last_input() -> None:
    prof = load_profile("claude")
    tr = StateTracker(prof, clock=lambda: 0.0)
    limit = "● API Error: Request rejected (429) · rate limit"
    assert tr.update(Snapshot((limit, *BOX))).state is AgentState.LIMITED
    tr.input_sent()
    # The answered message is still on screen: the agent reads as what the rest says.
    assert tr.update(Snapshot((limit, "● Done.", *BOX))).state is AgentState.READY
    tr.input_sent()
    # A second limit message (the resumed prompt hit the limit again) is LIMITED again.
    assert tr.update(Snapshot((limit, "● Done.", limit, *BOX))).state is AgentState.LIMITED


def test_tracker_baseline_follows_old_messages_out_of_the_region() -> None:
    prof = load_profile("claude")  # region: the last 30 lines
    tr = StateTracker(prof, clock=lambda: 0.0)
    limit = "● API Error: Request rejected (429) · rate limit"
    tr.update(Snapshot((limit, *BOX)))
    tr.input_sent()
    filler = tuple(f"● line {i}" for i in range(40))
    assert tr.update(Snapshot((limit, *filler, *BOX))).state is AgentState.READY
    # The old one scrolled away; a new one counts.
    assert tr.update(Snapshot((*filler, limit, *BOX))).state is AgentState.LIMITED


# --- a turn that meets a limit, on the fake agent -------------------------------------------

NONCE = "0a1b2c3d"
LIMIT_SCENARIO = """
[[rules]]
match = '^DO (?P<id>\\S+) nonce='
reply = 'Claude usage limit reached. Please try again in {secs} seconds.'

[[rules]]
match = '^continue$'
reply = '''
Picking up where I left off.

```
[[POLI:MSG {{"to":"ORCH","type":"done","id":"T1","nonce":"{nonce}"}}]]
<REPORT>
Did T1 after the limit.
</REPORT>
[[/POLI:MSG]]
```
'''
"""
ALWAYS_LIMITED = """
[[rules]]
match = '.*'
reply = 'Claude usage limit reached. Please try again in 1 seconds.'
"""


async def _start(
    tmux_server: TmuxServer,
    client: ControlClient,
    tmp_path: pathlib.Path,
    body: str,
    *,
    transcript: bool = False,
    **kw: t.Any,
) -> AgentDriver:
    """The fake agent in claude mode; ``transcript``: it writes one, with usage, where its
    profile looks."""
    path = tmp_path / "fa.toml"
    path.write_text(body, "utf-8")
    argv = [*FAKE, "--mode", "claude", "--scenario", str(path), "--log", str(tmp_path / "fa")]
    if transcript:
        argv += ["--transcript", ".fake-transcript.jsonl"]
    return await AgentDriver.start(
        "AGENT",
        load_profile("fake-claude"),
        argv=argv,
        host=Host(tmux_server, "t"),
        window="agent",
        cwd=tmp_path,
        ready_timeout=READY,
        **kw,
    )


async def test_limited_turn_waits_for_the_reset_then_continues(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    # The limit lasts longer than the turn's whole timeout: only a paused clock survives it.
    body = LIMIT_SCENARIO.format(secs=25, nonce=NONCE)
    policy = LimitPolicy(resume="continue", margin=0.0)
    driver = await _start(tmux_server, tmux_session, tmp_path, body, store=store, limits=policy)
    try:
        async with asyncio.timeout(180):
            result = await driver.run_turn(
                lambda n: f"DO T1 nonce={n}", Expect.block("done"), timeout=20, nonce=NONCE
            )
        assert result.outcome is TurnOutcome.ANSWERED, result.error
        assert result.block is not None and "after the limit" in result.block.body
        assert result.limited_for > 0
        assert prompts(tmp_path / "fa") == [f"DO T1 nonce={NONCE}".encode(), b"continue"]
        kinds = [e.kind for e in store.list_events()]
        assert kinds.index("limited") < kinds.index("limit-resumed")
        limited = next(e for e in store.list_events() if e.kind == "limited")
        assert "usage limit reached" in limited.detail and "resets at" in limited.detail
        assert "the screen says" in limited.detail
        assert driver.state is AgentState.READY
    finally:
        await driver.kill()
        store.close()


async def test_limit_that_never_lifts_ends_the_turn_stuck(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    store = RunStore.open(tmp_path / "runs.sqlite3")
    policy = LimitPolicy(resume="continue", margin=0.0, max_resumes=2)
    driver = await _start(
        tmux_server, tmux_session, tmp_path, ALWAYS_LIMITED, store=store, limits=policy
    )
    try:
        async with asyncio.timeout(180):
            result = await driver.run_turn("DO T2 nonce=x", Expect.block("done"), timeout=60)
        assert result.outcome is TurnOutcome.STUCK, result
        assert "still limited after 2 resume(s)" in result.error
        assert prompts(tmp_path / "fa") == [b"DO T2 nonce=x", b"continue", b"continue"]
        kinds = [e.kind for e in store.list_events()]
        assert kinds.count("limit-resumed") == 2 and "limit-gave-up" in kinds
    finally:
        await driver.kill()
        store.close()


async def test_two_looks_at_one_agent_resume_its_limit_once(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # The router's step and a message lane look at one agent through its one driver (one
    # owner per agent) at its limit's reset: the resume text is typed once.
    store = RunStore.open(tmp_path / "runs.sqlite3")
    policy = LimitPolicy(resume="continue", margin=0.0)
    body = LIMIT_SCENARIO.format(secs=2, nonce=NONCE)
    driver = await _start(tmux_server, tmux_session, tmp_path, body, store=store, limits=policy)
    try:
        assert (await driver.deliver(f"DO T1 nonce={NONCE}")).ok

        async def limited() -> bool:
            looks = await asyncio.gather(driver.observe(), driver.observe())
            return all(o.state is AgentState.LIMITED for o in looks)

        await aretry_until(limited, 30, what="the limit")

        async def due() -> bool:
            return (driver.limit_due_in() or 0.0) <= 0

        await aretry_until(due, 30, what="the limit's reset")
        await asyncio.gather(driver.observe(), driver.observe())

        async def answered() -> bool:
            return [e["event"] for e in read_log(tmp_path / "fa")].count("reply") == 2

        await aretry_until(answered, 30, what="the agent's answer to what was typed at the reset")
        assert prompts(tmp_path / "fa") == [f"DO T1 nonce={NONCE}".encode(), b"continue"]
        assert [e.kind for e in store.list_events()].count("limit-resumed") == 1
    finally:
        await driver.kill()
        store.close()


# --- tokens and budgets ---------------------------------------------------------------------

DONE_SCENARIO = """
[[rules]]
match = '(?s)DO (?P<id>\\S+) nonce=(?P<nonce>[0-9a-f]+)'
reply = '''
Done.

```
[[POLI:MSG {{"to":"ORCH","type":"done","id":"{{id}}","nonce":"{{nonce}}"}}]]
<REPORT>
Did {{id}}.
</REPORT>
[[/POLI:MSG]]
```
'''
"""


async def test_turn_tokens_add_up_per_agent_task_and_run(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    from politerm.driver.tokens import stored_tokens
    from politerm.protocol.usage import claude_usage
    from politerm.status import collect

    store = RunStore.open(tmp_path / "runs.sqlite3")
    store.upsert_agent(
        "AGENT",
        session="t",
        pane_id="%1",
        command="fake",
        cwd=str(tmp_path),
        profile="fake-claude",
        resume_command=None,
    )
    driver = await _start(
        tmux_server, tmux_session, tmp_path, DONE_SCENARIO.format(), store=store, transcript=True
    )
    try:
        async with asyncio.timeout(120):
            one = await driver.run_turn(
                lambda n: f"DO T1 nonce={n}", Expect.block("done"), timeout=60, task_id="T1"
            )
            two = await driver.run_turn(
                lambda n: f"DO T2 nonce={n}", Expect.block("done"), timeout=60, task_id="T2"
            )
        assert one.ok and two.ok, (one.error, two.error)
        lines = (tmp_path / ".fake-transcript.jsonl").read_text().splitlines()
        expected = usage_total(claude_usage(lines))
        assert expected.total > 0
        assert stored_tokens(store, "agent:AGENT") == expected
        assert stored_tokens(store, "run") == expected
        t1, t2 = stored_tokens(store, "task:T1"), stored_tokens(store, "task:T2")
        assert t1 + t2 == expected and t1.total > 0 and t2.total > 0
        events = [e for e in store.list_events() if e.kind == "tokens"]
        assert [e.task_id for e in events] == ["T1", "T2"]
        assert f"{t1.total:,} tokens" in events[0].detail
        data = collect(store)
        assert data["agents"][0]["tokens"] == expected.total
        assert data["tokens"] == expected.total
    finally:
        await driver.kill()
        store.close()


async def test_an_answer_written_before_the_confirmation_is_counted(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # A quick agent answers (and its transcript records the usage) before the delivery is
    # confirmed: the turn counts from before the paste, not from the confirmation.
    from politerm.driver.tokens import stored_tokens
    from politerm.protocol.usage import claude_usage
    from politerm.testing.retry import aretry_until

    store = RunStore.open(tmp_path / "runs.sqlite3")
    driver = await _start(
        tmux_server, tmux_session, tmp_path, DONE_SCENARIO.format(), store=store, transcript=True
    )
    transcript = tmp_path / ".fake-transcript.jsonl"

    async def answered_first() -> None:
        async def written() -> bool:
            lines = transcript.read_text().splitlines() if transcript.exists() else []
            return usage_total(claude_usage(lines)).total > 0

        await aretry_until(written, 60, what="the answer's usage in the agent's transcript")

    driver.on("after-confirm", answered_first)
    try:
        async with asyncio.timeout(120):
            res = await driver.run_turn(
                lambda n: f"DO T1 nonce={n}", Expect.block("done"), timeout=60, task_id="T1"
            )
        assert res.ok, res.error
        expected = usage_total(claude_usage(transcript.read_text().splitlines()))
        assert expected.total > 0
        assert stored_tokens(store, "task:T1") == expected
    finally:
        await driver.kill()
        store.close()


async def test_turn_over_its_token_budget_ends_with_a_budget_event(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    from politerm.driver import Budget

    store = RunStore.open(tmp_path / "runs.sqlite3")
    # The first reply (before the block) costs over 100 tokens; the block never comes.
    body = """
[[rules]]
match = 'DO'
reply = 'Thinking about it for a long while.'
"""
    driver = await _start(
        tmux_server,
        tmux_session,
        tmp_path,
        body,
        store=store,
        budget=Budget(turn_tokens=50),
        transcript=True,
    )
    try:
        async with asyncio.timeout(120):
            result = await driver.run_turn("DO T3 nonce=ab", Expect.block("done"), timeout=60)
        assert result.outcome is TurnOutcome.OVER_BUDGET, result
        assert "the turn used" in result.error and "budget of 50 tokens" in result.error
        budget = [e for e in store.list_events() if e.kind == "budget"]
        assert len(budget) == 1 and "[budget] turn_tokens" in budget[0].detail
    finally:
        await driver.kill()
        store.close()


# --- the router: a task waits while its agent is limited -----------------------------------

LIMITED_EXECUTER = (
    'mode = "codex"\nthink_time = 0.3\n\n'
    "[[rules]]\n"
    "match = 'You received a PLANNER plan block'\n"
    "reply = '''You've hit your usage limit. Try again in 20 seconds.'''\n\n"
    "[[rules]]\n"
    "match = '^continue$'\n"
    "reply = '''Back after the limit.\n\n```\n"
    '[[POLI:MSG {"to":"PLANNER","type":"result","id":"L1"}]]\n'
    "<RESULT>\nDone after the limit.\n</RESULT>\n[[/POLI:MSG]]\n```\n'''\n"
)


async def test_router_task_waits_out_a_limit_longer_than_its_step_timeout(
    server: t.Any, tmp_path: pathlib.Path
) -> None:
    from politerm.messaging.routing import run_task
    from politerm.store.models import TaskState
    from tests.loophelpers import started, write_project

    write_project(
        tmp_path,
        str(server.socket_name),
        executer=LIMITED_EXECUTER,
        exec_timeout=10,
        extra="[routing]\nrequire_nonce = false\n\n[limits]\nmargin = 0\n",
    )
    async with started(tmp_path) as loop:
        task = await run_task(loop.config, loop.store, "limited please", task_id="L1", timeout=150)
        assert task.state is TaskState.DONE, (task.state, task.error)
        kinds = [e.kind for e in loop.store.list_events(task_id="L1")]
        for kind in ("limited", "deadline-paused", "limit-resumed", "deadline-resumed"):
            assert kind in kinds, kinds
        assert "timeout" not in kinds and "nudge" not in kinds, kinds
        assert loop.prompts("EXECUTER")[-1] == "continue"


# --- what the views show --------------------------------------------------------------------


def usage_total(entries: Entries) -> Usage:
    """The tokens of ``entries``, each keyed message counted once (its last entry)."""
    keyed: dict[str, Usage] = {}
    total = Usage()
    for key, usage in entries:
        if key is None:
            total += usage
        else:
            keyed[key] = usage
    return sum(keyed.values(), total)


def _agent_pane(socket: str, root: pathlib.Path, line: str) -> str:
    """A session "ours" of the project whose one pane (agent A1) shows ``line``."""
    import subprocess

    tmux = ["tmux", "-L", socket]
    pane = subprocess.run(
        [*tmux, "new-session", "-d", "-P", "-F", "#{pane_id}", "-s", "ours",
         f"echo '{line}'; sleep 600"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([*tmux, "set-option", "-p", "-t", pane, "@poli_agent", "A1"], check=True)
    subprocess.run([*tmux, "set-option", "-t", "ours", "@poli_project", str(root)], check=True)
    return pane


async def test_overview_shows_a_limited_agent_and_its_tokens(
    server: t.Any, tmp_path: pathlib.Path
) -> None:
    from politerm.config import load_config
    from politerm.driver.tokens import add_tokens
    from politerm.protocol.usage import Usage
    from politerm.testing.retry import aretry_until
    from politerm.ui.live import LiveState

    socket = str(server.socket_name)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{socket}"\n\n[store]\npath = "r.sqlite3"\n')
    pane = _agent_pane(socket, root, "Claude usage limit reached. Please try again in 2 hours.")
    config = load_config(root, env={})
    with RunStore.open(config.store.resolved_path()) as store:
        store.upsert_agent(
            "A1", session="ours", pane_id=pane, command="claude", cwd=str(root),
            profile="claude", resume_command=None,
        )  # fmt: skip
        store.set_agent_state("A1", AgentState.LIMITED.value)
        add_tokens(store, ["agent:A1", "run"], Usage(1000, 234))
        async with LiveState(config, store, project=root) as live:

            async def row() -> dict[str, t.Any] | None:
                rows = [a for a in live.overview["agents"] if a["name"] == "A1"]
                return rows[0] if rows and rows[0]["state"] == "limited" else None

            agent = await aretry_until(row, 60, what="A1 shown limited in the overview")
            assert agent["tokens"] == 1234


async def test_router_fails_a_task_whose_turn_goes_over_its_token_budget(
    server: t.Any, tmp_path: pathlib.Path
) -> None:
    from politerm.driver.tokens import stored_tokens
    from politerm.messaging.routing import run_task
    from politerm.store.models import TaskState
    from tests.loophelpers import started, write_project

    path = write_project(tmp_path, str(server.socket_name), extra="[budget]\nturn_tokens = 50\n")
    # The planner keeps a transcript with usage: its plan turn costs well over 50 tokens.
    text = path.read_text().replace(
        'planner.jsonl"]', 'planner.jsonl", "--transcript", ".fake-transcript.jsonl"]', 1
    )
    path.write_text(text)
    async with started(tmp_path) as loop:
        task = await run_task(loop.config, loop.store, "too dear", task_id="B1", timeout=120)
        assert task.state is TaskState.FAILED, task
        assert task.error is not None and "budget of 50 tokens" in task.error
        budget = [e for e in loop.store.list_events(task_id="B1") if e.kind == "budget"]
        assert len(budget) == 1 and "PLANNER: the turn used" in budget[0].detail
        assert stored_tokens(loop.store, "task:B1").total > 50


async def test_an_answered_turn_waits_for_its_usage_only_where_a_transcript_is(
    tmp_path: pathlib.Path,
) -> None:
    # A node's remote turn ends with run_turn's settle: waiting out USAGE_GRACE for usage
    # that cannot come (no transcript where the profile looks) held each reply back 1 s.
    from politerm.driver.tokens import TokenMeter, stored_tokens
    from politerm.testing.fakeagent.transcript import Transcript

    profile = load_profile("fake-codex")
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        meter = TokenMeter("EXECUTER", profile, cwd=tmp_path, env={}, store=store)
        assert meter.works  # the profile names a transcript; the agent keeps none here
        meter.start_turn("T1")
        # An hour's grace, bounded far below it: without a transcript it ends at once.
        await asyncio.wait_for(meter.settle(grace=3600), 30)
        assert meter.end_turn().total == 0

        transcript = Transcript(tmp_path / ".fake-transcript.jsonl")
        transcript.user("DO T2")  # the CLI writes the prompt's line on submit
        meter.start_turn("T2")

        async def answer_late() -> None:
            await asyncio.sleep(0.2)
            transcript.assistant("Done.")

        late = asyncio.create_task(answer_late())
        await asyncio.wait_for(meter.settle(grace=3600), 30)
        await late
        transcript.close()
        assert meter.end_turn().total > 0  # the usage written after the answer is counted
        assert stored_tokens(store, "task:T2").total > 0
