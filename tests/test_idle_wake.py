"""Idle costs nothing: no watcher thread, no timer, no agent loop waking without a reason.

The store watch sleeps on inotify in the event loop (a ``watchfiles`` thread only where
inotify cannot be had); an idle agent's routing loop sleeps until its pane prints, dies,
the store gives it work, or silence alone would change its state.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import threading
import typing as t

import pytest

from politerm.agents import AgentState, load_profile
from politerm.agents.profile import AgentProfile, Detectors
from politerm.agents.tracker import StateTracker
from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.driver import AgentDriver
from politerm.engine.agentstep import IDLE_BACKSTOP, TURN_BACKSTOP
from politerm.engine.routebase import Routing
from politerm.engine.router import Router, idle_backstop
from politerm.store import RunStore
from politerm.store import watch as watch_mod
from politerm.store.watch import StoreWatch
from politerm.terminal import Snapshot
from politerm.testing.retry import aretry_until
from politerm.tmux import new_window

if t.TYPE_CHECKING:
    from politerm.tmux import ControlClient, Pane, TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
SETTLE_SCREEN = (
    (pathlib.Path(__file__).parent / "fixtures" / "screens" / "opencode-plan-drawn.txt")
    .read_text()
    .splitlines()
)


def _commit_from_another_process(path: pathlib.Path) -> None:
    code = (
        "import sys, pathlib\n"
        "from politerm.store import RunStore\n"
        "with RunStore.open(pathlib.Path(sys.argv[1])) as s:\n"
        "    s.add_event('note', detail='x')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


# --- the store watch --------------------------------------------------------------------


async def test_the_store_watch_runs_without_a_thread_and_wakes_on_a_commit(
    tmp_path: pathlib.Path,
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.fail("this test checks the inotify watcher, which exists on Linux only")
    path = tmp_path / "runs.sqlite3"
    RunStore.open(path).close()
    before = set(threading.enumerate())
    async with StoreWatch(path) as watch:
        assert watch.running
        # Threads of earlier tests may end meanwhile; none may start for the watch.
        started = set(threading.enumerate()) - before
        assert not started, f"an idle store watch must not need a thread: {started}"
        changed = watch.event()
        await asyncio.to_thread(_commit_from_another_process, path)
        assert await watch.wait(30, event=changed), "no store notification within 30 s"
    assert not watch.running


async def test_a_burst_of_commits_is_one_notification(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "runs.sqlite3"
    with RunStore.open(path) as store:
        # A long gathering window makes the burst certain to fall inside it.
        async with StoreWatch(path, step_ms=2000) as watch:
            changed = watch.event()
            for i in range(5):
                store.set_meta("k", str(i))
            assert await watch.wait(30, event=changed)
            assert watch.changes == 1


async def test_without_inotify_the_watchfiles_fallback_still_wakes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A platform without inotify (or past its watch limit): watch_dir says so with None.
    monkeypatch.setattr(watch_mod, "watch_dir", lambda *_a: None)
    path = tmp_path / "runs.sqlite3"
    RunStore.open(path).close()
    async with StoreWatch(path) as watch:
        assert watch._inotify is None and watch.running
        changed = watch.event()
        await asyncio.to_thread(_commit_from_another_process, path)
        assert await watch.wait(30, event=changed), "no store notification within 30 s"


# --- the tracker: when silence alone changes a verdict ----------------------------------


class Case(t.NamedTuple):
    test_id: str
    profile: AgentProfile
    screen: str
    expect: float | None


_DET = Detectors(ready=["^> ?$"], busy=["working"])


def _prof(*, stuck_after: float = 0.0, quiescence: float = 0.0) -> AgentProfile:
    return AgentProfile(name="x", detectors=_DET, stuck_after=stuck_after, quiescence=quiescence)


CASES = [
    Case("ready-never-by-silence", _prof(stuck_after=60), "> ", None),
    Case("busy-goes-stuck", _prof(stuck_after=60), "working", 160.0),
    Case("busy-no-stuck-limit", _prof(), "working", None),
    Case("unreadable-goes-quiet", _prof(quiescence=2.0), "??", 102.0),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_next_change_says_when_silence_alone_changes_the_state(case: Case) -> None:
    tracker = StateTracker(case.profile)
    tracker.update(Snapshot((case.screen,)), now=100.0)
    assert tracker.next_change() == case.expect


# --- the router: an idle agent's loop sleeps until something happens --------------------


async def _router_over_a_fake_agent(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path, profile: str
) -> tuple[Router, RunStore, Pane]:
    """A router (not running) over one fake agent "A" under ``profile``, and its store."""
    pane = await new_window(tmux_session, tmux_server, session="t", name="A", argv=FAKE)
    store = RunStore.open(tmp_path / "runs.sqlite3")
    config = Config(
        tmux=TmuxConfig(socket=tmux_server.socket_name, session="t"),
        store=StoreConfig(path=store.path),
    )
    driver = AgentDriver("A", load_profile(profile), pane, store=store)
    return Router(Routing(config, store, {"A": driver})), store, pane


async def test_an_idle_agent_loop_sleeps_until_an_event(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    router, store, pane = await _router_over_a_fake_agent(
        tmux_session, tmux_server, tmp_path, "fake-plain"
    )
    steps = [0]
    step = router._step

    async def counted(driver: t.Any) -> None:
        steps[0] += 1
        await step(driver)

    router._step = counted  # type: ignore[method-assign]
    routing = asyncio.create_task(router.run())
    try:
        driver = router.agents["A"]

        async def ready() -> bool:
            return driver.state is AgentState.READY

        await aretry_until(ready, 60, what="the fake agent to be ready")
        assert IDLE_BACKSTOP >= 300
        assert router._sleep_for(driver) == idle_backstop("A") >= IDLE_BACKSTOP
        # Output still wakes it at once.
        before = steps[0]
        await pane.send_keys("x")

        async def woken() -> bool:
            return steps[0] > before

        await aretry_until(woken, 60, what="the agent loop to wake on output")
    finally:
        router.stop()
        await routing
        store.close()


def test_idle_backstops_of_many_agents_are_spread_not_one_burst() -> None:
    # 500 idle agents started together: before, every loop's backstop look fell at the same
    # moment (IDLE_BACKSTOP after its first look), 500 screen reads in one burst.
    bounds = [idle_backstop(f"IDLE{i:03d}") for i in range(500)]
    assert all(IDLE_BACKSTOP <= b < 1.5 * IDLE_BACKSTOP for b in bounds)
    per_second: dict[int, int] = {}
    for b in bounds:
        per_second[int(b)] = per_second.get(int(b), 0) + 1
    assert max(per_second.values()) <= 12, sorted(per_second.values())[-5:]
    assert len(per_second) >= 100


@pytest.mark.parametrize("profile", ["fake-claude", "opencode"])
async def test_a_block_is_taken_at_a_second_look_after_the_settle_time_or_at_once_without(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path, profile: str
) -> None:
    # The second look that lets a block count (BlockParser settle) is the profile's
    # block_settle after the first, not the 0.5 s bound of a quiet agent in a turn:
    # opencode keeps 0.5 s; the fake agent draws each screen in one write, its profile
    # says 0 and its block counts at the first look.
    router, store, _ = await _router_over_a_fake_agent(tmux_session, tmux_server, tmp_path, profile)
    try:
        driver = router.agents["A"]
        router.loops["A"].turn_nonce = "0123abcd"  # a turn is open
        assert not driver.blocks_settling
        assert router._sleep_for(driver) == TURN_BACKSTOP
        taken = await driver.read_blocks(Snapshot(tuple(SETTLE_SCREEN)), -1, None)  # seen once
        if profile.startswith("fake"):
            assert driver.profile.block_settle == 0
            assert [b.kind for b in taken] == ["plan"]
            assert not driver.blocks_settling
            assert router._sleep_for(driver) == TURN_BACKSTOP
        else:
            assert taken == []
            assert driver.blocks_settling
            assert router._sleep_for(driver) == driver.profile.block_settle == 0.5
    finally:
        store.close()
