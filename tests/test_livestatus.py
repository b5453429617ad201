"""poli status shows live agent state; --watch redraws on store commits and pane deaths only."""

from __future__ import annotations

import asyncio
import os
import signal
import typing as t

from politerm import livestatus
from politerm.driver.observer import Observer
from politerm.livestatus import watch
from politerm.status import collect
from politerm.testing.retry import retry_until
from tests.loophelpers import started, write_project

if t.TYPE_CHECKING:
    import pathlib

    import libtmux
    import pytest


async def test_a_dead_pane_is_exited_at_once(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    write_project(tmp_path, server.socket_name)
    async with started(tmp_path) as loop:
        live = Observer(loop.session.host.server)
        try:
            states = await live.states(loop.store.list_agents())
            assert states == {"PLANNER": "ready", "EXECUTER": "ready"}
            # The store still says READY: no router ran to notice the death.
            os.kill(loop.pid("EXECUTER"), signal.SIGKILL)
            executer = loop.store.get_agent("EXECUTER")
            assert executer is not None
            pane = await loop.session.host.server.pane("t", executer.pane_id)
            async with asyncio.timeout(60):
                while await pane.is_alive():
                    await pane.wait_output(0.5)
            # A fresh reading (one `poli status`) lists the panes: exited at once.
            fresh = Observer(loop.session.host.server)
            try:
                assert (await fresh.states(loop.store.list_agents()))["EXECUTER"] == "exited"
            finally:
                await fresh.close()
            # A live one hears it from tmux's pane_dead announcement (its event wakes).
            async with asyncio.timeout(60):
                while (await live.states(loop.store.list_agents()))["EXECUTER"] != "exited":
                    await live.event().wait()
            states = await live.states(loop.store.list_agents())
            assert states["EXECUTER"] == "exited"
            assert states["PLANNER"] == "ready"
            stored = {a.name: a.state for a in loop.store.list_agents()}
            assert stored["EXECUTER"] == "ready"
            data = collect(loop.store, live=states)
            shown = {a["name"]: a["state"] for a in data["agents"]}
            assert shown == {"PLANNER": "ready", "EXECUTER": "exited"}
        finally:
            await live.close()


async def test_watch_redraws_on_a_commit_and_on_a_death_not_on_a_timer(
    server: libtmux.Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert server.socket_name is not None
    # The backstop out of the way: every redraw below must come from an event.
    monkeypatch.setattr(livestatus, "WATCH_BACKSTOP", 3600.0)
    write_project(tmp_path, server.socket_name)
    async with started(tmp_path) as loop:

        def control_window() -> str:
            return "\n".join(server.cmd("capture-pane", "-p", "-t", "=t:control").stdout)

        # The control window's own status process opens the store once as it starts.
        await asyncio.to_thread(
            retry_until, lambda: "EXECUTER" in control_window(), 20, what="the control window"
        )
        live = Observer(loop.session.host.server)
        frames: list[dict[str, t.Any]] = []
        drawn = asyncio.Event()

        def draw(data: dict[str, t.Any]) -> None:
            frames.append(data)
            drawn.set()

        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(loop.store, live, draw, collect=collect, stop=stop))

        async def next_frame(what: str, within: float = 30) -> dict[str, t.Any]:
            drawn.clear()
            waiter = asyncio.ensure_future(drawn.wait())
            # The watch loop ending (an exception) is reported as such, not as a silence.
            await asyncio.wait(
                [waiter, watcher], timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            if watcher.done():
                msg = f"the watch loop ended before a redraw after {what}: {watcher!r}"
                raise AssertionError(msg)
            if not drawn.is_set():
                msg = f"no redraw within {within:g} s after {what}"
                raise AssertionError(msg)
            return frames[-1]

        try:
            first = await next_frame("start")
            assert {a["state"] for a in first["agents"]} == {"ready"}
            # Quiet: nothing changes, nothing is drawn.
            drawn.clear()
            with_quiet = len(frames)
            try:
                async with asyncio.timeout(1.5):
                    await drawn.wait()
            except TimeoutError:
                pass
            assert len(frames) == with_quiet, "redrawn with nothing changed"
            loop.store.add_event("note", detail="hello from a commit")
            frame = await next_frame("a commit")
            assert frame["events"][-1]["detail"] == "hello from a commit"
            os.kill(loop.pid("PLANNER"), signal.SIGKILL)
            # tmux's pane_dead notification redraws at once (it was lost when the subscription
            # ran before the client's attach: fixed, see test_tmux_control).
            for i in range(10):
                frame = await next_frame(f"the planner's death (frame {i})", 30)
                states = {a["name"]: a["state"] for a in frame["agents"]}
                if states["PLANNER"] == "exited":
                    break
            assert states == {"PLANNER": "exited", "EXECUTER": "ready"}
        finally:
            stop.set()
            await asyncio.wait_for(watcher, 60)
            await live.close()


async def test_a_redraw_does_not_list_the_panes_again(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # Listing a session's panes on each redraw is tmux server work that grows with the
    # panes (issue 25): listed once, then kept true by tmux's pane_dead announcements.
    assert server.socket_name is not None
    write_project(tmp_path, server.socket_name)
    async with started(tmp_path) as loop:
        live = Observer(loop.session.host.server)
        try:
            states = await live.states(loop.store.list_agents())
            assert states == {"PLANNER": "ready", "EXECUTER": "ready"}
            assert live.pane_listings == 1
            for i in range(5):
                loop.store.add_event("note", detail=f"commit {i}")
                states = await live.states(loop.store.list_agents())
            assert states == {"PLANNER": "ready", "EXECUTER": "ready"}
            assert live.pane_listings == 1
            os.kill(loop.pid("EXECUTER"), signal.SIGKILL)

            async def exited() -> bool:
                await live.event().wait()
                found = await live.states(loop.store.list_agents())
                return found["EXECUTER"] == "exited"

            async with asyncio.timeout(60):
                while not await exited():
                    pass
            states = await live.states(loop.store.list_agents())
            assert states == {"PLANNER": "ready", "EXECUTER": "exited"}
            # Only a change of windows or panes (tmux announces it) lists them again.
            assert live.pane_listings <= 2
        finally:
            await live.close()
