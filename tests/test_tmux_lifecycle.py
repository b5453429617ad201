"""Pastes over the control connection; an empty private server takes its files with it."""

from __future__ import annotations

import asyncio
import os
import secrets
import typing as t

import pytest

from politerm.errors import TmuxCommandError
from politerm.testing.retry import aretry_until
from politerm.tmux import ControlClient, TmuxServer
from politerm.tmux._staging import staging_dir

if t.TYPE_CHECKING:
    import pathlib


@pytest.fixture
async def own_server(tmp_path: pathlib.Path) -> t.AsyncIterator[TmuxServer]:
    """A server this test starts itself (socket name unique), killed if it is still up."""
    srv = TmuxServer(f"poli-test-{secrets.token_hex(4)}", config_dir=tmp_path / "tmuxconf")
    yield srv
    await srv.run("kill-server")
    await srv.close()


async def test_paste_loads_the_buffer_over_control_mode_and_leaves_no_file(
    own_server: TmuxServer,
) -> None:
    await own_server.ensure_session("t", argv=["cat"])
    client = await own_server.connect("t")
    pane = (await client.cmd("list-panes", "-t", "=t", "-F", "#{pane_id}"))[0]
    from politerm.tmux.pane import Pane

    text = "secret-ish text; $HOME `x` 'q' \"dq\"\nsecond line"
    await Pane(client, pane, own_server).paste(text.encode(), bracketed=False)

    async def pasted() -> bool:
        screen = "\n".join(await client.cmd("capture-pane", "-p", "-t", pane))
        return "second line" in screen

    await aretry_until(pasted, 60, what="the pasted text on screen")
    staging = staging_dir()
    assert staging.stat().st_mode & 0o777 == 0o700
    assert list(staging.iterdir()) == [], "a staged paste file was left behind"
    # No buffer left behind either (paste-buffer -d).
    assert await client.cmd("list-buffers", "-F", "#{buffer_name}") == []


async def test_cmds_answers_in_order_and_raises_the_first_error(own_server: TmuxServer) -> None:
    await own_server.ensure_session("t")
    client = await own_server.connect("t")
    out = await client.cmds(["display-message", "-p", "a"], ["display-message", "-p", "b"])
    assert out == [["a"], ["b"]]
    with pytest.raises(TmuxCommandError, match="no-such"):
        await client.cmds(["no-such-command"], ["display-message", "-p", "c"])
    # The connection is still in step after an error in the middle of a batch.
    assert await client.cmd("display-message", "-p", "d") == ["d"]


async def test_killing_the_last_session_removes_socket_and_config(
    own_server: TmuxServer,
) -> None:
    await own_server.ensure_session("a")
    await own_server.ensure_session("b")
    conf = own_server.config_dir / f"tmux-{own_server.socket_name}.conf"
    assert conf.exists() and own_server.socket_path().exists()
    await own_server.kill_session("a")
    # Another session is left: the server and its files stay.
    assert await own_server.is_running()
    assert conf.exists() and own_server.socket_path().exists()
    await own_server.kill_session("b")
    assert not await own_server.is_running()
    assert not own_server.socket_path().exists()
    assert not conf.exists()
    # Looking at a stopped server does not recreate its config.
    assert await own_server.list_sessions() == []
    assert not conf.exists()


async def test_an_empty_server_exits_by_itself(own_server: TmuxServer) -> None:
    await own_server.ensure_session("a", argv=["sh", "-c", "exit 0"])
    client = ControlClient(own_server.socket_name, "a")
    # remain-on-exit keeps the dead pane; closing the window empties the server.
    await client.start()
    await client.cmd("kill-window", "-t", "=a:0")
    await client.close()

    async def stopped() -> bool:
        return not await own_server.is_running()

    await aretry_until(stopped, 60, what="the empty server to exit")
    assert await own_server.close_if_empty()
    assert not own_server.socket_path().exists()


async def test_a_live_servers_socket_is_never_removed(own_server: TmuxServer) -> None:
    await own_server.ensure_session("a")
    other = TmuxServer(own_server.socket_name, config_dir=own_server.config_dir)
    # Someone else's view says "empty" only after a list; a live listener keeps its file.
    assert not await other.close_if_empty()
    assert own_server.socket_path().exists()
    await asyncio.sleep(0)
    assert os.path.exists(own_server.socket_path())  # noqa: PTH110


async def test_connecting_from_many_tasks_at_once_starts_one_control_client(
    own_server: TmuxServer,
) -> None:
    # A postman's lanes attach to the same session together; a second client would be lost
    # (never closed) when the first is stored over it.
    await own_server.ensure_session("t")
    clients = await asyncio.gather(*(own_server.connect("t") for _ in range(4)))
    assert all(c is clients[0] for c in clients)
    rc, out, _ = await own_server.run("list-clients", "-F", "#{client_control_mode}")
    assert rc == 0
    assert out.split() == ["1"]


async def test_programs_started_in_panes_do_not_see_tmuxs_variables(
    own_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    # every agent politerm starts (a session's, a pipeline step's, an epic's…) goes through
    # new_window, split_pane or respawn: none can reach the private server by a plain `tmux`
    from politerm.tmux.pane import new_window, split_pane

    await own_server.ensure_session("t")
    client = await own_server.connect("t")

    def dump(name: str) -> list[str]:
        return ["sh", "-c", f"env > {tmp_path / name}.env; exec sleep 60"]

    async def started_clean(name: str) -> None:
        path = tmp_path / f"{name}.env"

        async def written() -> bool:
            return path.is_file() and "PATH=" in path.read_text()

        await aretry_until(written, 30, what=f"{name}: the environment written")
        names = {line.partition("=")[0] for line in path.read_text().splitlines()}
        assert not names & {"TMUX", "TMUX_PANE"}, name

    # Each program has written its environment before the next step: the respawn kills the
    # first pane's program, which under load had not always written it yet.
    first = await new_window(client, own_server, session="t", name="w", argv=dump("new"))
    await started_clean("new")
    await split_pane(first, argv=dump("split"))
    await started_clean("split")
    await first.respawn(dump("respawn"))
    await started_clean("respawn")


async def test_a_pane_gets_its_own_size_not_the_starting_terminals_columns(
    own_server: TmuxServer, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shell (or pytest-xdist) that exported COLUMNS=80: a program that reads it (aider's
    # pretty mode does) would draw for 80 columns in a 200-column pane.
    from politerm.tmux.pane import new_window

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    await own_server.ensure_session("t")
    client = await own_server.connect("t")
    out = tmp_path / "pane.env"
    argv = ["sh", "-c", f"env > {out}; exec sleep 60"]
    await new_window(client, own_server, session="t", name="w", argv=argv)

    async def written() -> bool:
        return out.is_file() and "PATH=" in out.read_text()

    await aretry_until(written, 30, what="the pane's environment written")
    names = {line.partition("=")[0] for line in out.read_text().splitlines()}
    assert not names & {"COLUMNS", "LINES"}, sorted(names)


async def test_a_pty_gets_its_own_size_not_the_starting_terminals_columns(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from politerm.pty.runner import PtyTerminal

    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "pty.env"
    argv = ["sh", "-c", f"env > {out}; stty size >> {out}; exec sleep 60"]
    term = await PtyTerminal.spawn(argv, size=(132, 40))

    async def written() -> bool:
        return out.is_file() and out.read_text().rstrip().endswith("132")

    try:
        await aretry_until(written, 30, what="the PTY's environment and size written")
    finally:
        term.close()
    text = out.read_text()
    assert "COLUMNS=" not in text and text.split()[-2:] == ["40", "132"], text


async def test_a_session_starts_right_after_kill_server_while_the_old_server_exits(
    own_server: TmuxServer,
) -> None:
    # `tmux kill-server` returns before the server is gone; a command that reaches the
    # exiting server dies with it ("server exited unexpectedly"). `poli up --resume` after a
    # killed server does exactly this; it must start a new server, never fail.
    for round_ in range(8):
        await own_server.ensure_session("a", argv=["sleep", "1000"])
        for _ in range(12):
            rc, _, err = await own_server.run("split-window", "-t", "=a:", "sleep", "1000")
            assert rc == 0 or "no space" in err, err
            await own_server.run("select-layout", "-t", "=a:", "tiled")
        # An attached control client (ours) keeps the server alive until it has gone.
        await own_server.connect("a")
        rc, _, err = await own_server.run("kill-server")
        assert rc == 0, err
        assert await own_server.ensure_session("a", argv=["sleep", "1000"]), round_
        assert await own_server.has_session("a")
        # The next round starts on a new server: this one is waited out (the raw kill-server
        # above is the race under test; a dying server found by the next round's
        # has-session would be a race of the test's own making).
        await own_server.kill_server()
