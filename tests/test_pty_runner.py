"""The headless PTY runner and its live view, on the scripted fake agent in real PTYs.

The live view tests run ``poli go`` (or a small harness) inside a PTY this test drives, and
compare the terminal's modes (``stty -g``) before and after: restored after an agent crash,
an exception, a soft stop, an abort and SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import termios
import textwrap
import typing as t

import psutil
import ptyprocess
import pytest

import politerm
from politerm.agents.profile import load_profile
from politerm.agents.state import AgentState
from politerm.driver import wait_ready
from politerm.driver.delivery import deliver
from politerm.driver.stop import StopControl
from politerm.errors import PtyError
from politerm.pty import PtyTerminal, key_bytes
from politerm.testing.fakeagent import prompts, read_log
from politerm.testing.retry import aretry_until, retry_until

SRC = pathlib.Path(politerm.__file__).resolve().parent.parent
FAKE = [sys.executable, "-m", "politerm.testing.fakeagent"]


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "TERM": "xterm-256color"}


# --- PtyTerminal ----------------------------------------------------------------------------


async def test_pty_terminal_runs_delivery_and_detection(tmp_path: pathlib.Path) -> None:
    log = tmp_path / "fa.jsonl"
    term = await PtyTerminal.spawn(
        [*FAKE, "--mode", "claude", "--log", str(log)], cwd=tmp_path, size=(100, 30)
    )
    chunks: list[bytes] = []
    term.subscribe(chunks.append)
    profile = load_profile("fake-claude")
    try:
        await wait_ready(term, profile, timeout=20)
        snap = await term.snapshot()
        assert profile.detect(snap).state is AgentState.READY
        assert term.bracketed_paste
        result = await deliver(term, "hello pty\nsecond line", profile)
        assert result.ok, result
        assert prompts(log) == [b"hello pty\nsecond line"]

        async def echoed() -> bool:
            return any("ECHO: hello pty" in line for line in (await term.snapshot()).lines)

        await aretry_until(echoed, 60, what="the reply on the rendered screen")
        assert b"ECHO: hello pty" in b"".join(chunks)
        term.resize(90, 25)
        events = await aretry_until(
            lambda: _async([e for e in read_log(log) if e["event"] == "resize"]),
            10,
            what="the resize to reach the agent",
        )
        assert (events[-1]["cols"], events[-1]["rows"]) == (90, 25)
    finally:
        await term.kill()
    assert not term.is_alive()
    assert term.exit_status == 128 + signal.SIGTERM


async def _async(value: t.Any) -> t.Any:
    return value


async def test_pty_terminal_sees_a_crash(tmp_path: pathlib.Path) -> None:
    scenario = tmp_path / "crash.toml"
    scenario.write_text("[[rules]]\naction = 'crash'\n")
    term = await PtyTerminal.spawn([*FAKE, "--mode", "plain", "--scenario", str(scenario)])
    profile = load_profile("fake-plain")
    await wait_ready(term, profile, timeout=20)
    result = await deliver(term, "boom", profile)
    assert result.outcome.value in ("agent_exited", "delivered")
    assert await term.wait_exit(10) == 3
    snap = await term.snapshot()
    assert not snap.alive
    assert profile.detect(snap).state is AgentState.EXITED
    await term.kill()


def test_key_names() -> None:
    assert key_bytes("Escape") == b"\x1b"
    assert key_bytes("C-d") == b"\x04"
    assert key_bytes("BTab") == b"\x1b[Z"
    with pytest.raises(ValueError, match="not a key name"):
        key_bytes("rm -rf ~")


async def test_missing_program_is_a_pty_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PtyError, match="command not found"):
        await PtyTerminal.spawn([str(tmp_path / "no-such-agent")])


NO_PTY = """
import asyncio, resource, sys
from politerm.errors import PtyError
from politerm.pty import PtyTerminal

async def main():
    # Leave no file descriptor free: a PTY (two descriptors) cannot be allocated.
    used = max(int(fd) for fd in __import__("os").listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 1, used + 1))
    try:
        await PtyTerminal.spawn(["sh"])
    except PtyError as exc:
        print(exc)
        return 1
    return 0

sys.exit(asyncio.run(main()))
"""


def test_no_pty_gives_an_actionable_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", NO_PTY],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    message = proc.stdout.strip()
    assert message.startswith("cannot allocate a pseudo-terminal:")
    assert "/dev/ptmx" in message
    assert "--tmux" in message
    assert "\n" not in message


# --- the live view, driven from outside through a real PTY -------------------------------


class Tty:
    """A command in a PTY this test drives: read everything it prints, type into it."""

    def __init__(self, argv: list[str], cwd: pathlib.Path, rows: int = 30, cols: int = 120):
        self.proc = ptyprocess.PtyProcess.spawn(
            argv, cwd=str(cwd), env=env(), dimensions=(rows, cols)
        )
        self.out = bytearray()

    def pump(self) -> bytes:
        while True:
            ready, _, _ = select.select([self.proc.fd], [], [], 0)
            if not ready:
                return bytes(self.out)
            try:
                data = os.read(self.proc.fd, 65536)
            except OSError:
                return bytes(self.out)
            if not data:
                return bytes(self.out)
            self.out += data

    def wait_for(self, text: bytes, seconds: float = 30) -> None:
        retry_until(lambda: text in self.pump(), seconds, what=f"{text!r} on the terminal")

    def send(self, data: bytes) -> None:
        os.write(self.proc.fd, data)

    def raw_mode(self) -> bool:
        return not termios.tcgetattr(self.proc.fd)[3] & termios.ICANON

    def close(self) -> None:
        if self.proc.isalive():
            self.proc.terminate(force=True)


def shell_wrapped(cwd: pathlib.Path, command: list[str]) -> list[str]:
    """``sh`` that records ``stty -g`` before and after ``command`` and its exit status."""
    quoted = " ".join(f"'{c}'" for c in command)
    script = (
        f"stty -g > {cwd}/before; {quoted}; echo $? > {cwd}/rc.tmp; "
        f"stty -g > {cwd}/after; mv {cwd}/rc.tmp {cwd}/rc"
    )
    return ["sh", "-c", script]


def finished(cwd: pathlib.Path, tty: Tty, seconds: float = 60) -> int:
    def done() -> str | None:
        tty.pump()
        rc = cwd / "rc"
        return rc.read_text().strip() if rc.exists() else None

    return int(retry_until(done, seconds, what="the command under test to finish"))


def assert_restored(cwd: pathlib.Path) -> None:
    before = (cwd / "before").read_text().strip()
    after = (cwd / "after").read_text().strip()
    assert before
    assert after == before


HARNESS = """
import asyncio, sys
from politerm.agents.profile import load_profile
from politerm.driver import wait_ready
from politerm.pty import PtyTerminal
from politerm.pty.liveview import LiveView

async def main():
    term = await PtyTerminal.spawn(
        [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "plain"]
    )
    try:
        async with LiveView(term, fields=lambda: ["harness", "live"], on_interrupt=lambda: None):
            await wait_ready(term, load_profile("fake-plain"), timeout=20)
            print("LIVE-VIEW-UP", end="", flush=True)
            raise RuntimeError("boom inside the live view")
    finally:
        await term.kill()

asyncio.run(main())
"""


def test_live_view_restores_the_terminal_after_an_exception(tmp_path: pathlib.Path) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    tty = Tty(shell_wrapped(tmp_path, [sys.executable, str(harness)]), tmp_path)
    try:
        rc = finished(tmp_path, tty)
    finally:
        tty.close()
    out = tty.pump()
    assert rc == 1
    assert b"LIVE-VIEW-UP" in out
    assert b"RuntimeError: boom inside the live view" in out
    # The status line and key legend were drawn, in reverse video on the bottom row.
    assert b"harness \xc2\xb7 live" in out
    assert b"^C wrap up" in out
    assert_restored(tmp_path)


def project(tmp_path: pathlib.Path, scenario: str, items: list[tuple[str, str]]) -> pathlib.Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    argv = [*FAKE, "--mode", "plain", "--scenario", scenario, "--log", str(root / "fa.jsonl")]
    (root / "poli.toml").write_text(
        textwrap.dedent(
            f"""
            [store]
            path = "state/runs.sqlite3"
            [epic]
            agent = "fake-plain"
            source = "builtin"
            grace = 20
            session_timeout = 60
            [epic.commands]
            fake-plain = {json.dumps(argv)}
            """
        )
    )
    for item_id, title in items:
        subprocess.run(
            [sys.executable, "-m", "politerm", "work", "add", "E", title, "--id", item_id],
            cwd=root,
            env=env(),
            check=True,
            capture_output=True,
        )
    return root


def records(root: pathlib.Path) -> list[dict[str, t.Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "politerm", "log", "--json"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return t.cast("list[dict[str, t.Any]]", json.loads(out.stdout))


def go(root: pathlib.Path) -> Tty:
    command = [sys.executable, "-m", "politerm", "go", "E", "--yes", "--no-summary"]
    return Tty(shell_wrapped(root, command), root)


def test_live_view_restores_the_terminal_after_an_agent_crash(tmp_path: pathlib.Path) -> None:
    root = project(tmp_path, "epic-items", [("c-1", "CRASH now")])
    tty = go(root)
    try:
        retry_until(lambda: (tty.pump(), tty.raw_mode())[1], 30, what="the live view's raw mode")
        rc = finished(root, tty)
    finally:
        tty.close()
    assert rc == 1
    assert_restored(root)
    [record] = records(root)
    assert record["status"] == "error"
    assert "exited (status 3)" in record["error"]
    assert b"item c-1" in tty.pump()


def test_soft_stop_delivers_a_note_and_stops_the_run(tmp_path: pathlib.Path) -> None:
    root = project(tmp_path, "epic-items", [("s-1", "SILENT first"), ("s-2", "Second")])
    log = root / "fa.jsonl"
    tty = go(root)
    try:
        # The agent answered the item without a report; the session waits for one.
        retry_until(lambda: log.exists() and any(e["event"] == "reply" for e in read_log(log)),
                    30, what="the agent's reply without a report")  # fmt: skip
        tty.send(b"\x03")
        rc = finished(root, tty)
    finally:
        tty.close()
    assert rc == 130
    assert_restored(root)
    sent = [p.decode() for p in prompts(log)]
    assert len(sent) == 2
    assert sent[1].startswith("OPERATOR NOTE: please wrap up now.")
    [record] = records(root)
    assert record["item_id"] == "s-1"
    assert record["status"] == "success"
    assert record["commit_summary"] == "Stopped early at the operator's request"
    assert b"wrapping up" in tty.pump()


def test_second_ctrl_c_aborts(tmp_path: pathlib.Path) -> None:
    scenario = tmp_path / "quiet.toml"
    scenario.write_text("mode = 'plain'\nthink_time = 0.1\ndefault_reply = 'Hmm.'\n")
    root = project(tmp_path, str(scenario), [("q-1", "Anything")])
    log = root / "fa.jsonl"
    tty = go(root)
    try:
        retry_until(lambda: log.exists() and any(e["event"] == "reply" for e in read_log(log)),
                    30, what="the agent's reply without a report")  # fmt: skip
        tty.send(b"\x03")
        retry_until(lambda: len(prompts(log)) == 2, 30, what="the operator note")
        tty.send(b"\x03")
        rc = finished(root, tty)
    finally:
        tty.close()
    assert rc == 130
    assert_restored(root)
    [record] = records(root)
    assert record["status"] == "aborted"
    assert record["error"] == "aborted by the operator"
    exits = [e for e in read_log(log) if e["event"] == "exit"]
    assert [e["reason"] for e in exits] == ["SIGTERM"]


def test_sigterm_restores_the_terminal(tmp_path: pathlib.Path) -> None:
    scenario = tmp_path / "quiet.toml"
    scenario.write_text("mode = 'plain'\nthink_time = 0.1\ndefault_reply = 'Hmm.'\n")
    root = project(tmp_path, str(scenario), [("t-1", "Anything")])
    log = root / "fa.jsonl"
    tty = go(root)
    try:
        retry_until(lambda: log.exists() and any(e["event"] == "reply" for e in read_log(log)),
                    30, what="the agent's reply without a report")  # fmt: skip
        poli = [
            p
            for p in psutil.Process(tty.proc.pid).children(recursive=True)
            if "politerm" in p.cmdline() and "go" in p.cmdline()
        ]
        assert len(poli) == 1
        poli[0].send_signal(signal.SIGTERM)
        rc = finished(root, tty)
    finally:
        tty.close()
    assert rc == 130
    assert_restored(root)
    [record] = records(root)
    assert record["status"] == "aborted"


async def test_stop_control_levels() -> None:
    stop = StopControl()
    seen: list[int] = []
    stop.listen(lambda: seen.append(stop.level))
    stop.request()
    assert stop.soft
    assert not stop.aborted
    stop.request()
    stop.request()
    assert stop.aborted
    assert seen == [1, 2, 2]
    await asyncio.sleep(0)
