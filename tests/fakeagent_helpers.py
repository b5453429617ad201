"""Drive a fake agent in a real tmux pane: start, type, paste, read the screen and log."""

from __future__ import annotations

import os
import pathlib
import shlex
import sys
import typing as t

import pytest

from politerm.testing.fakeagent import read_log
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from libtmux.server import Server

READY = {
    "claude": "? for shortcuts",
    "codex": "› Ask Codex to do anything",
    "gemini": "Type your message or @path/to/file",
    "plain": "fakeagent (plain)",
}


class FakePane:
    """One fake agent running in its own tmux session."""

    def __init__(
        self,
        server: Server,
        workdir: pathlib.Path,
        mode: str,
        *,
        scenario: str | pathlib.Path | None = None,
        extra: t.Sequence[str] = (),
        width: int = 200,
        height: int = 50,
        name: str = "fa",
    ) -> None:
        self.server = server
        self.workdir = workdir
        self.mode = mode
        self.log = workdir / f"{name}.jsonl"
        argv = [sys.executable, "-m", "politerm.testing.fakeagent", "--mode", mode]
        argv += ["--log", str(self.log), "--name", name]
        if scenario is not None:
            argv += ["--scenario", str(scenario)]
        argv += list(extra)
        self.status_file = workdir / f"{name}.status"
        status_tmp = workdir / f"{name}.status.tmp"
        tmp, final = shlex.quote(str(status_tmp)), shlex.quote(str(self.status_file))
        command = f"{shlex.join(argv)}; echo $? > {tmp}; mv {tmp} {final}"
        session = server.new_session(
            session_name=name,
            window_command=command,
            start_directory=str(workdir),
            x=width,
            y=height,
        )
        pane = session.active_pane
        assert pane is not None
        assert pane.pane_id is not None
        self.pane_id: str = pane.pane_id
        # Keep a dead pane around so its last screen can still be read.
        self.tmux("set-option", "-w", "-t", self.pane_id, "remain-on-exit", "on")

    # --- tmux ---------------------------------------------------------------------------

    def tmux(self, *args: str) -> list[str]:
        """Run a tmux command on this test's server; return its stdout lines."""
        result = self.server.cmd(*args)
        assert not result.stderr, f"tmux {args[0]}: {result.stderr}"
        return list(result.stdout)

    def screen(self, *, history: bool = False) -> str:
        """The visible screen (and scrollback with ``history``), lines joined."""
        extra = ["-S", "-"] if history else []
        return "\n".join(self.tmux("capture-pane", "-p", "-J", *extra, "-t", self.pane_id))

    def lines(self) -> list[str]:
        """Visible screen lines, trailing blanks stripped."""
        return [line.rstrip() for line in self.screen().split("\n")]

    def type(self, text: str) -> None:
        """Type ``text`` literally (not a paste)."""
        self.tmux("send-keys", "-t", self.pane_id, "-l", text)

    def keys(self, *keys: str) -> None:
        """Press keys by tmux name (``Enter``, ``Escape``, ``C-c``...)."""
        self.tmux("send-keys", "-t", self.pane_id, *keys)

    def paste(self, data: bytes) -> None:
        """Bracketed paste of ``data``, LF kept, as politerm delivers prompts."""
        path = self.workdir / ".paste.tmp"
        path.write_bytes(data)
        self.tmux("load-buffer", "-b", "fa-paste", str(path))
        self.tmux("paste-buffer", "-p", "-r", "-d", "-b", "fa-paste", "-t", self.pane_id)
        path.unlink()

    def dead_status(self) -> int | None:
        """Exit status once the agent has exited, else ``None``.

        Read from a file the wrapping shell writes: tmux 3.3a sometimes never reaps a
        pane's process (pane dead, ``pane_dead_status`` empty, process a zombie).
        """
        text = self.status_file.read_text() if self.status_file.exists() else ""
        return int(text) if text.strip() else None

    # --- waiting ------------------------------------------------------------------------

    def wait_screen(self, text: str, seconds: float = 5.0, *, history: bool = False) -> str:
        """Wait until ``text`` is on screen; return the screen."""

        def check() -> str | None:
            screen = self.screen(history=history)
            return screen if text in screen else None

        return retry_until(
            check,
            seconds,
            what=f"{text!r} on the {self.mode} screen",
        )

    def wait_gone(self, text: str, seconds: float = 5.0) -> str:
        """Wait until ``text`` is no longer on screen."""

        def check() -> str | None:
            screen = self.screen()
            return screen if text not in screen else None

        return retry_until(
            check,
            seconds,
            what=f"{text!r} to leave the {self.mode} screen",
        )

    def wait_ready(self, seconds: float = 10.0) -> str:
        """Wait for the idle screen of this mode."""
        self.wait_event("start", seconds)
        return self.wait_screen(READY[self.mode], seconds)

    def events(self, kind: str | None = None) -> list[dict[str, t.Any]]:
        """Logged events (of one kind)."""
        if not self.log.exists():
            return []
        return [e for e in read_log(self.log) if kind is None or e["event"] == kind]

    def wait_event(self, kind: str, seconds: float = 5.0, count: int = 1) -> list[dict[str, t.Any]]:
        """Wait until ``count`` events of ``kind`` are logged; return them."""

        def check() -> list[dict[str, t.Any]] | None:
            events = self.events(kind)
            return events if len(events) >= count else None

        return retry_until(
            check,
            seconds,
            what=f"{count} {kind!r} event(s) in {self.log.name}",
        )

    def wait_dead(self, seconds: float = 5.0) -> int:
        """Wait for the agent to exit; return its status."""

        def check() -> tuple[int] | None:
            status = self.dead_status()
            return (status,) if status is not None else None

        status = retry_until(
            check,
            seconds,
            what="the fake agent to exit",
        )
        return status[0]


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists (and is not a zombie we could reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def write_scenario(tmp_path: pathlib.Path, body: str, name: str = "scenario.toml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(body, "utf-8")
    return path


@pytest.fixture(name="workdir")
def workdir_fixture(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
