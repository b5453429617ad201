"""The control-mode client against a real private tmux server."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys
import typing as t

import psutil
import pytest

from politerm.errors import (
    PaneNotFound,
    ServerNotRunning,
    SessionNotFound,
    TmuxCommandError,
    TmuxLookupError,
)
from politerm.testing.retry import aretry_until
from politerm.tmux import (
    ControlClient,
    TmuxServer,
    find_agent_pane,
    find_pane_running,
    new_window,
    split_pane,
)

if t.TYPE_CHECKING:
    from politerm.tmux import Pane


async def _sh(client: ControlClient, srv: TmuxServer, name: str = "w", *argv: str) -> Pane:
    pane = await new_window(
        client, srv, session="t", name=name, argv=list(argv) or ["sh"], agent=name
    )
    if not argv:
        await _prompted(pane)
    return pane


async def _prompted(pane: Pane) -> None:
    """Wait for the shell's first prompt: text typed ahead of it is echoed before the prompt,
    and the command's output then lands on the prompt's line (a slow machine's race)."""

    async def shown() -> bool:
        return any(ln.strip() for ln in await pane.capture())

    await aretry_until(shown, 60, what=f"the shell prompt in {pane.pane_id}")


async def test_command_reply_and_error(tmux_session: ControlClient) -> None:
    assert await tmux_session.cmd("display-message", "-p", "#{session_name}") == ["t"]
    # quoting survives quotes, dollars and semicolons
    weird = """it's "q" $HOME; #{x}"""
    await tmux_session.cmd("set-option", "-g", "@weird", weird)
    assert await tmux_session.cmd("show-options", "-gv", "@weird") == [weird]
    with pytest.raises(TmuxCommandError, match="unknown command"):
        await tmux_session.cmd("no-such-command")


async def test_many_commands_in_flight_keep_order(tmux_session: ControlClient) -> None:
    results = await asyncio.gather(
        *(tmux_session.cmd("display-message", "-p", f"n{i}") for i in range(200))
    )
    assert results == [[f"n{i}"] for i in range(200)]


async def test_output_events_carry_decoded_bytes(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    pane = await _sh(tmux_session, tmux_server)
    chunks: list[bytes] = []
    tmux_session.feeds.subscribe(pane.pane_id, lambda _pid, data: chunks.append(data))
    await pane.paste(b"printf 'tab\\there\\\\x\\n'\n")

    async def seen() -> bool:
        return b"tab\there\\x\r\n" in b"".join(chunks)

    await aretry_until(seen, 60, what="decoded %output with a tab and a backslash")
    assert tmux_session.feeds.seq(pane.pane_id) > 0
    assert tmux_session.feeds.last(pane.pane_id) > 0


async def test_dead_pane_is_pane_not_found(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    pane = await _sh(tmux_session, tmux_server)
    await pane.kill()
    with pytest.raises(PaneNotFound, match=pane.pane_id):
        await pane.capture()
    with pytest.raises(PaneNotFound):
        await pane.info()
    assert not await pane.is_alive()


async def test_exited_program_leaves_a_dead_pane_with_its_last_screen(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    # The pause: output written in the instant before the program exits can be lost between
    # the kernel's pty and tmux under load (the pane read EOF first); that is not this test.
    pane = await _sh(tmux_session, tmux_server, "x", "sh", "-c", "echo bye; sleep 1; exit 7")

    async def dead() -> bool:
        return (await pane.info()).dead

    await aretry_until(dead, 60, what="the pane's program to exit")
    # tmux 3.3a sometimes never reaps the child, leaving #{pane_dead_status} empty; when it
    # does report a status, it is the program's.
    assert (await pane.info()).dead_status in (7, None)
    assert "bye" in await pane.capture_history()


async def test_dropped_connection_reconnects(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    pane = await _sh(tmux_session, tmux_server)
    assert tmux_session.connections == 1
    # Kill the control-mode client process itself, as an OOM killer or a stray kill would.
    clients = await tmux_session.cmd("list-clients", "-F", "#{client_pid} #{client_control_mode}")
    pids = [int(c.split()[0]) for c in clients if c.endswith(" 1")]
    assert pids
    os.kill(pids[0], signal.SIGKILL)

    async def reconnected() -> bool:
        return tmux_session.connections == 2 and tmux_session.connected

    await aretry_until(reconnected, 60, what="the control connection to come back")
    assert await pane.is_alive()
    assert await tmux_session.cmd("display-message", "-p", "ok") == ["ok"]


async def test_killed_server_raises_server_not_running(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    await _sh(tmux_session, tmux_server)
    rc, _, _ = await tmux_server.run("kill-server")
    assert rc == 0

    async def gone() -> bool:
        return tmux_session.dead_reason is not None

    await aretry_until(gone, 60, what="the client to notice the server is gone")
    with pytest.raises(ServerNotRunning, match="gone"):
        await tmux_session.cmd("display-message", "-p", "x", timeout=5)


async def test_missing_server_and_session(tmux_server: TmuxServer) -> None:
    client = ControlClient(tmux_server.socket_name, "nope", reconnect=False)
    with pytest.raises(ServerNotRunning):
        await client.start()
    await tmux_server.ensure_session("t")
    with pytest.raises(SessionNotFound):
        await ControlClient(tmux_server.socket_name, "nope").start()


async def test_private_config_is_used(tmux_session: ControlClient) -> None:
    assert await tmux_session.cmd("show-options", "-gv", "history-limit") == ["200000"]
    assert await tmux_session.cmd("show-options", "-gv", "remain-on-exit") == ["on"]


async def test_capture_screen_escapes_and_history(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    pane = await _sh(tmux_session, tmux_server)
    await pane.paste(
        b"i=0; while [ $i -lt 120 ]; do echo line$i; i=$((i+1)); done; "
        b"printf '\\033[31mred\\033[0m\\n'\n"
    )

    async def done() -> bool:
        return any(ln == "red" for ln in await pane.capture())

    await aretry_until(done, 60, what="120 lines and a red word")
    plain = await pane.capture()
    colored = await pane.capture(escapes=True)
    assert "red" in plain
    assert any("\x1b[31m" in ln for ln in colored)
    history = await pane.capture_history()
    assert "line1" in history and "line119" in history
    assert len(history) > len(plain)


async def test_resize_and_user_option(tmux_session: ControlClient, tmux_server: TmuxServer) -> None:
    pane = await _sh(tmux_session, tmux_server, "agentx")
    await pane.resize(120, 30)
    info = await pane.info()
    assert (info.width, info.height) == (120, 30)
    assert info.agent == "agentx"
    assert await pane.get_option("@poli_agent") == "agentx"
    found = await find_agent_pane(tmux_session, tmux_server, "agentx")
    assert found is not None and found.pane_id == pane.pane_id


async def test_kill_takes_the_whole_tree_even_when_it_ignores_sighup(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    script = "trap '' HUP TERM; sleep 600 & sleep 601 & wait"
    pane = await _sh(tmux_session, tmux_server, "tree", "sh", "-c", script)

    async def children() -> list[psutil.Process]:
        info = await pane.info()
        kids = psutil.Process(info.pid).children(recursive=True)
        return kids if len(kids) >= 2 else []

    kids = await aretry_until(children, 60, what="two sleep children")
    root = psutil.Process((await pane.info()).pid)
    await pane.kill(grace=1.0)
    for proc in [root, *kids]:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE


async def test_find_pane_running_program(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    await _sh(tmux_session, tmux_server, "a")
    pane = await _sh(
        tmux_session, tmux_server, "b", sys.executable, "-c", "import time; time.sleep(60)"
    )

    async def found() -> Pane | None:
        return await find_pane_running(tmux_session, tmux_server, pathlib.Path(sys.executable).name)

    hit = await aretry_until(found, 60, what="the python pane")
    assert hit.pane_id == pane.pane_id
    assert await find_pane_running(tmux_session, tmux_server, "no-such-program") is None


async def test_notifications_window_close_and_pane_mode(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    seen: list[str] = []
    tmux_session.on_notification(lambda note: seen.append(note.name))
    pane = await _sh(tmux_session, tmux_server, "n")
    woken = pane.output_event()
    await tmux_session.cmd("copy-mode", "-t", pane.pane_id)
    await asyncio.wait_for(woken.wait(), 5)  # the watcher is woken by %pane-mode-changed
    assert (await pane.info()).in_mode
    await pane.leave_copy_mode()
    assert not (await pane.info()).in_mode
    await tmux_session.cmd("kill-window", "-t", (await pane.info()).window_id)

    async def closed() -> bool:
        return "window-close" in seen or "unlinked-window-close" in seen

    await aretry_until(closed, 60, what="%window-close")
    assert "pane-mode-changed" in seen


async def test_split_pane_with_size_cwd_env(
    tmux_session: ControlClient, tmux_server: TmuxServer, tmp_path: pathlib.Path
) -> None:
    left = await new_window(
        tmux_session, tmux_server, session="t", name="s", argv=["sh"], size=(160, 40)
    )
    info = await left.info()
    assert (info.width, info.height) == (160, 40)
    right = await split_pane(left, argv=["sh"], cwd=tmp_path, env={"POLI_X": "42"}, agent="RIGHT")
    await _prompted(right)
    await right.paste(b'echo "$POLI_X:$(pwd)"\n')
    want = f"42:{tmp_path}"

    async def shown() -> bool:
        return any(ln.strip() == want for ln in await right.capture())

    await aretry_until(shown, 60, what="env and cwd echoed in the new pane")
    assert (await right.info()).agent == "RIGHT"


# A stand-in tmux for the one race real tmux hits too rarely to test (about 1 start in 40
# under load): it answers the first command at once but announces the attach 0.5 s later,
# and refuses client-scoped commands before that, as real tmux does ("no current client").
_LATE_ATTACH_TMUX = """\
import sys, threading
if "has-session" in sys.argv:
    sys.exit(0)
log, lock, attached, n = open(sys.argv[-1][1:] + ".log", "a"), threading.Lock(), [], [0]
def say(*lines):
    with lock:
        sys.stdout.write("".join(line + "\\n" for line in lines))
        sys.stdout.flush()
def attach():
    attached.append(1)
    say("%session-changed $0 t")
for line in sys.stdin:
    if not line.strip():
        break
    n[0] += 1
    log.write(f"{line.split()[0]} attached={bool(attached)}\\n")
    log.flush()
    if n[0] == 1:  # the attach, announced 0.5 s after the first answer
        threading.Timer(0.5, attach).start()
    if line.startswith("refresh-client") and not attached:
        say(f"%begin 1 {n[0]} 1", "no current client", f"%error 1 {n[0]} 1")
    else:
        say(f"%begin 1 {n[0]} 1", "t", f"%end 1 {n[0]} 1")
"""


async def test_start_returns_only_once_tmux_has_attached_the_client(
    tmp_path: pathlib.Path,
) -> None:
    fake = tmp_path / "tmux"
    fake.write_text(f"#!{sys.executable}\n{_LATE_ATTACH_TMUX}")
    fake.chmod(0o700)
    # The session name doubles as the log's path (the stand-in's last argument is "=name").
    client = ControlClient("late", str(tmp_path / "s"), tmux=str(fake), reconnect=False)
    await client.start()
    await client.cmd("refresh-client", "-B", "probe:%*:1")
    await client.close()
    log = (tmp_path / "s.log").read_text().splitlines()
    # The handshake ran before the attach; the death hook, the dead-pane subscription and
    # the probe after.
    assert log == [
        "display-message attached=False",
        "set-hook attached=True",
        "refresh-client attached=True",
        "refresh-client attached=True",
    ]


async def test_a_started_client_is_attached_so_client_commands_work_at_once(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    # tmux may read a new control client's first commands before its attach: a
    # client-scoped command (the dead-pane subscription) then failed with "no current
    # client" in about 1 of 40 starts under load, and deaths went unseen until a backstop.
    failures: list[str] = []
    for _ in range(200):
        client = ControlClient(tmux_server.socket_name, "t", tmux=tmux_server.tmux)
        await client.start()
        try:
            await client.cmd("refresh-client", "-B", "probe:%*:#{pane_dead}")
        except TmuxCommandError as exc:
            failures.append(str(exc))
        finally:
            await client.close()
    assert failures == []


async def test_a_quiet_client_gets_output_only_while_subscribed(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    loud = tmux_session
    pane = await _sh(loud, tmux_server)
    quiet = ControlClient(tmux_server.socket_name, "t")
    await quiet.start()

    async def printed(n: int) -> None:
        """The pane prints a mark; return once tmux read it (the loud client got it) and
        the quiet client has had everything tmux wrote to it before (a reply comes last)."""
        mark = f"{n * 7}mark".encode()
        chunks: list[bytes] = []
        seen = asyncio.Event()

        def on(_pid: str, data: bytes) -> None:
            chunks.append(data)
            if mark in b"".join(chunks):
                seen.set()

        stop = loud.feeds.subscribe(pane.pane_id, on)
        try:
            # The shell prints the product, so the mark is not in the echoed command.
            await pane.paste(f"echo $(({n} * 7))mark\n".encode())
            async with asyncio.timeout(60):
                await seen.wait()
        finally:
            stop()
        assert await quiet.cmd("display-message", "-p", "x") == ["x"]

    async def flags() -> str:
        lines = await loud.cmd("list-clients", "-F", "#{client_pid} #{client_flags}")
        return next(f for pid, f in (ln.split(" ", 1) for ln in lines) if int(pid) == quiet_pid)

    try:
        assert quiet._proc is not None
        quiet_pid = quiet._proc.pid
        await quiet.quiet()
        assert quiet.output_off
        assert "no-output" in await flags()
        await printed(1)
        assert quiet.feeds.seq(pane.pane_id) == 0
        # A subscriber turns the output on, for as long as it lasts.
        got: list[bytes] = []
        stop = quiet.feeds.subscribe(pane.pane_id, lambda _pid, data: got.append(data))
        assert not quiet.output_off
        await printed(2)
        assert b"14mark" in b"".join(got)
        stop()
        stop()  # a second call changes nothing
        assert quiet.output_off
        before = quiet.feeds.seq(pane.pane_id)
        await printed(3)
        assert quiet.feeds.seq(pane.pane_id) == before
        assert "no-output" in await flags()
        # A new connection (the old one was killed) is told again.
        os.kill(quiet_pid, signal.SIGKILL)

        async def reconnected() -> bool:
            return quiet.connections == 2 and quiet.connected and quiet.output_off

        await aretry_until(reconnected, 60, what="the quiet connection to come back")
        assert quiet._proc is not None
        quiet_pid = quiet._proc.pid
        assert "no-output" in await flags()
        before = quiet.feeds.seq(pane.pane_id)
        await printed(4)
        assert quiet.feeds.seq(pane.pane_id) == before
    finally:
        await quiet.close()


async def test_asking_a_server_that_does_not_answer_for_no_output_fails_in_time(
    tmux_session: ControlClient, tmux_server: TmuxServer
) -> None:
    # The views' quiet() waited for tmux's answer without a bound: a server that never
    # answered held `poli status` for good (a fleet fault run in CI hung 120 s there).
    quiet = ControlClient(tmux_server.socket_name, "t")
    await quiet.start()
    (pid,) = await tmux_session.cmd("display-message", "-p", "#{pid}")
    os.kill(int(pid), signal.SIGSTOP)
    try:
        with pytest.raises(TmuxLookupError, match="did not answer 'refresh-client' within"):
            await quiet.quiet()
    finally:
        os.kill(int(pid), signal.SIGCONT)
        await quiet.close()
    assert await tmux_session.cmd("display-message", "-p", "x") == ["x"]
