"""The driver's observer: the views' one door to the agents (real tmux, fake agents)."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import typing as t

from politerm.agents import load_profile
from politerm.agents.approval import ApprovalPolicy
from politerm.driver import AgentDriver
from politerm.driver.observer import Change, ChangeKind, Observer
from politerm.status import collect
from politerm.store import RunStore
from politerm.store.models import Agent
from politerm.testing.retry import aretry_until
from politerm.tmux.pane import new_window
from tests.loophelpers import started, write_project
from tests.test_approval_questions import OUTPUT, lines_of

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

    from politerm.tmux import ControlClient, TmuxServer


class _Heard:
    """What an observer announced, and a bounded wait for the next of it."""

    def __init__(self, observer: Observer) -> None:
        self.changes: list[Change] = []
        self._arrived = asyncio.Event()
        observer.listen(self._heard)

    def _heard(self, change: Change) -> None:
        self.changes.append(change)
        self._arrived.set()

    async def told(
        self, kind: ChangeKind, pane: str, count: int = 1, *, within: float = 60
    ) -> None:
        """Wait (at most ``within`` s) until ``pane`` was announced ``kind`` ``count`` times."""
        async with asyncio.timeout(within):
            while sum(c.kind is kind and c.pane_id == pane for c in self.changes) < count:
                self._arrived.clear()
                await self._arrived.wait()


async def test_a_pane_that_dies_is_reported_exited_once(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    write_project(tmp_path, server.socket_name)
    async with started(tmp_path) as loop:
        panes = {a.name: a.pane_id for a in loop.store.list_agents()}
        observer = Observer(loop.session.host.server)
        heard = _Heard(observer)
        changes = heard.changes
        try:
            assert await observer.follow("t")
            assert await observer.states(loop.store.list_agents()) == {
                "PLANNER": "ready",
                "EXECUTER": "ready",
            }
            os.kill(loop.pid("EXECUTER"), signal.SIGKILL)
            await heard.told(ChangeKind.EXITED, panes["EXECUTER"])
            # A later death is news of its own; the first one is not told again.
            os.kill(loop.pid("PLANNER"), signal.SIGKILL)
            await heard.told(ChangeKind.EXITED, panes["PLANNER"])
            deaths = [c.pane_id for c in changes if c.kind is ChangeKind.EXITED]
            assert deaths == [panes["EXECUTER"], panes["PLANNER"]], changes
            assert {c.session for c in changes} == {"t"}
            # The views show both EXITED although the store (no router ran) says ready.
            states = await observer.states(loop.store.list_agents())
            assert states == {"PLANNER": "exited", "EXECUTER": "exited"}
            assert {a.state for a in loop.store.list_agents()} == {"ready"}
        finally:
            await observer.close()


async def test_an_approval_shown_by_the_driver_appears_in_the_view(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    # An aider agent whose screen asks a question (a recorded real screen).
    screen = tmp_path / "question.screen"
    screen.write_text("\n".join(lines_of("aider-open-output-question.txt")))
    argv = ["sh", "-c", f"cat {shlex.quote(str(screen))}; exec sleep 600"]
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="executer", argv=argv,
        agent="EXECUTER", size=(200, 50),
    )  # fmt: skip
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.upsert_agent(
            "EXECUTER", session="t", pane_id=pane.pane_id, command="aider",
            cwd=str(tmp_path), profile="aider", resume_command=None,
        )  # fmt: skip
        store.set_agent_state("EXECUTER", "ready")
        observer = Observer(tmux_server)
        try:
            # The view says what the driver said last: it never reads the screen itself.
            assert await observer.states(store.list_agents()) == {"EXECUTER": "ready"}
            driver = AgentDriver(
                "EXECUTER", load_profile("aider"), pane, store=store,
                policy=ApprovalPolicy.of("ask"),
            )  # fmt: skip
            async with asyncio.timeout(60):
                while (await driver.observe()).approval != "asked":
                    await pane.wait_output(0.5)
            states = await observer.states(store.list_agents())
            assert states == {"EXECUTER": "waiting_approval"}
            data = collect(store, live=states)
            assert [a["state"] for a in data["agents"]] == ["waiting_approval"]
            [asked] = data["approvals"]
            assert (asked["agent"], asked["question"]) == ("EXECUTER", OUTPUT)
        finally:
            await observer.close()


def _collector(needle: bytes) -> tuple[list[bytes], asyncio.Event, t.Callable[[bytes], None]]:
    """A mirror's sink: what it got, and an event set once ``needle`` was among it."""
    chunks: list[bytes] = []
    found = asyncio.Event()

    def sink(data: bytes) -> None:
        chunks.append(data)
        if needle in b"".join(chunks):
            found.set()

    return chunks, found, sink


async def test_the_mirror_shows_the_screen_then_the_output(
    tmux_server: TmuxServer, tmux_session: ControlClient, tmp_path: pathlib.Path
) -> None:
    script = 'echo before; while read -r line; do echo "got $line"; done'
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="echo", argv=["sh", "-c", script],
        agent="ECHO",
    )  # fmt: skip

    async def shown() -> bool:
        return "before" in (await pane.snapshot()).lines

    await aretry_until(shown, 60, what="the pane to print its first line")
    observer = Observer(tmux_server)
    chunks, got, sink = _collector(b"got hello")
    try:
        [entry] = [p for p in await observer.panes() if p.agent == "ECHO"]
        mirror = await observer.mirror(entry, sink)
        assert b"before" in mirror.initial
        assert (mirror.pane_id, mirror.width) == (entry.pane_id, entry.width)
        await tmux_session.cmd("send-keys", "-t", entry.pane_id, "-l", "hello")
        await tmux_session.cmd("send-keys", "-t", entry.pane_id, "Enter")
        async with asyncio.timeout(60):
            await got.wait()
        mirror.stop()
        chunks.clear()
        await tmux_session.cmd("send-keys", "-t", entry.pane_id, "-l", "again")
        await tmux_session.cmd("send-keys", "-t", entry.pane_id, "Enter")
        # A second, live mirror sees the next line; the stopped one got nothing of it.
        _, again, second = _collector(b"got again")
        other = await observer.mirror(entry, second)
        if b"got again" not in other.initial:
            async with asyncio.timeout(60):
                await again.wait()
        other.stop()
        assert chunks == []
    finally:
        await observer.close()


async def test_the_views_observer_asks_for_no_output_but_mirrors_and_the_driver_get_it(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    # tmux writes every pane's output to every control client of the session: the views'
    # own observer (made by Observer.of) asks for none, except while it mirrors a pane.
    assert server.socket_name is not None
    write_project(tmp_path, server.socket_name)
    async with started(tmp_path) as loop:
        driver = await loop.session.host.server.connect("t")
        planner = {a.name: a.pane_id for a in loop.store.list_agents()}["PLANNER"]
        observer = Observer.of(loop.config)

        async def quiet_clients() -> int:
            flags = await driver.cmd("list-clients", "-F", "#{client_flags}")
            return sum("no-output" in f for f in flags)

        async def typed(text: str, *seen: list[bytes]) -> None:
            """Type ``text`` into the Planner's input box; until each of ``seen`` has it."""
            await driver.cmd("send-keys", "-t", planner, "-l", text)

            async def shown() -> bool:
                return all(text.encode() in b"".join(chunks) for chunks in seen)

            await aretry_until(shown, 60, what=f"{text!r} in the Planner's output")

        mine: list[bytes] = []
        driver.feeds.subscribe(planner, lambda _pid, data: mine.append(data))
        try:
            assert await observer.follow("t")
            assert await quiet_clients() == 1
            [entry] = [p for p in await observer.panes() if p.agent == "PLANNER"]
            mirrored: list[bytes] = []
            mirror = await observer.mirror(entry, mirrored.append)
            assert await quiet_clients() == 0
            await typed("abc", mine, mirrored)
            mirror.stop()

            async def quiet_again() -> bool:
                # Asked on the observer's connection, not answered: seen from another one.
                return await quiet_clients() == 1

            await aretry_until(quiet_again, 60, what="the observer to ask for no output again")
            # The driver's own connection still gets every output of its agents.
            await typed("def", mine)
        finally:
            await observer.close()


async def test_a_respawned_pane_is_alive_again_and_its_next_death_is_news(
    tmux_server: TmuxServer, tmux_session: ControlClient
) -> None:
    # A death reaches the views as a notice tmux sends only then (no pane_dead watch, which
    # tmux formats each second for every pane): a respawn is announced too, or the view would
    # keep the pane exited and take its next death for the old one.
    pane = await new_window(
        tmux_session, tmux_server, session="t", name="w", argv=["sleep", "600"], agent="A"
    )
    agent = Agent(
        name="A", session="t", pane_id=pane.pane_id, command="sleep", cwd="/",
        profile="generic", resume_command=None, env={}, state="ready", created=0.0,
        updated=0.0,
    )  # fmt: skip
    observer = Observer(tmux_server)
    heard = _Heard(observer)

    async def kill() -> None:
        pid = (await pane.info()).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    try:
        assert await observer.states([agent]) == {"A": "ready"}
        await kill()
        await heard.told(ChangeKind.EXITED, pane.pane_id, 1, within=30)
        assert await observer.states([agent]) == {"A": "exited"}
        await pane.respawn(["sleep", "600"])
        await heard.told(ChangeKind.LAYOUT, pane.pane_id, 1, within=30)
        assert await observer.states([agent]) == {"A": "ready"}
        await kill()
        await heard.told(ChangeKind.EXITED, pane.pane_id, 2, within=30)
        assert await observer.states([agent]) == {"A": "exited"}
    finally:
        await observer.close()
