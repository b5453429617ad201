"""The one start path (politerm.driver.host) on a real private tmux server with fake agents."""

from __future__ import annotations

import pathlib
import sys
import typing as t

from politerm.agents import load_profile
from politerm.driver import Host
from politerm.testing.retry import aretry_until

if t.TYPE_CHECKING:
    from politerm.tmux.server import TmuxServer

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]


async def test_launch_lists_respawns_and_stops_agents(
    tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    host = Host(tmux_server, "proj")
    assert not await host.is_up()
    assert await host.ensure(options={"@poli_project": str(tmp_path)})
    assert not await host.ensure()  # already there: not created again
    assert await host.is_up()

    first = await host.launch(
        "PLANNER", "generic", FAKE, cwd=tmp_path, env={}, hooks_dir=None, hooks=False
    )
    await host.launch("EXECUTER", "generic", FAKE, cwd=tmp_path, env={}, hooks_dir=None)
    panes = await host.agent_panes()
    assert sorted(panes) == ["EXECUTER", "PLANNER"]
    assert panes["PLANNER"].pane_id == first.term.pane_id
    assert first.argv[-len(FAKE) :] == FAKE
    found = await host.pane(first.term.pane_id)
    assert found is not None and found.pane_id == first.term.pane_id

    # A dead pane is started again in place: same pane, same agent name.
    await first.term.kill()
    assert await host.find_agent_pane("PLANNER") is None
    again = await host.launch(
        "EXECUTER",
        "generic",
        FAKE,
        cwd=tmp_path,
        env={},
        hooks_dir=None,
        replace=panes["EXECUTER"],
    )
    assert again.term.pane_id == panes["EXECUTER"].pane_id

    assert await host.stop_agents() == ["EXECUTER"]
    assert await host.agent_panes() == {}
    await host.kill()
    assert not await host.is_up()
    assert await host.pane(first.term.pane_id) is None


async def test_ensure_revives_the_first_window_and_attach_takes_an_agent_back(
    tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    host = Host(tmux_server, "run")
    runs = tmp_path / "runs"
    argv = ["sh", "-c", f"echo ran >> {runs}"]

    async def first_window_dead() -> bool:
        _, out, _ = await tmux_server.run("list-panes", "-t", "=run:0", "-F", "#{pane_dead}")
        return out.strip() == "1"

    assert await host.ensure(argv=argv)
    await aretry_until(first_window_dead, 10, what="the first window's program to end")
    assert not await host.ensure(argv=argv)  # without revive, an ended window stays so
    assert runs.read_text() == "ran\n"
    assert not await host.ensure(argv=argv, revive=True)
    await aretry_until(first_window_dead, 10, what="the revived program to end")
    assert runs.read_text() == "ran\nran\n"

    # A restarted workflow takes its agent back by name, dead or alive; none: None.
    assert await host.attach("STEP", load_profile("generic")) is None
    launched = await host.launch("STEP", "generic", FAKE, cwd=tmp_path, env={}, hooks_dir=None)
    driver = await host.attach("STEP", load_profile("generic"), cwd=tmp_path, approval_key="r.1")
    assert driver is not None and driver.terminal_name == launched.term.pane_id
    assert driver.approval_key == "r.1"
    await launched.term.kill()
    await host.kill()
