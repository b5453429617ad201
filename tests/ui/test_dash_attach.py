"""``poli dash`` in a real terminal: ``t`` attaches to the agent's pane, detaching comes back."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import typing as t

from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False
    ).stdout


def _terminals(socket: str) -> list[str]:
    """The sessions that terminal clients (not control-mode ones) are attached to."""
    out = _tmux(socket, "list-clients", "-F", "#{client_control_mode} #{client_session}")
    return [line.split()[1] for line in out.splitlines() if line.startswith("0 ")]


def test_attach_shows_the_agents_pane_and_detaching_returns_to_the_dashboard(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    inner = server.socket_name
    assert inner is not None
    root = tmp_path / "proj"
    root.mkdir()
    (root / "poli.toml").write_text(f'[tmux]\nsocket = "{inner}"\n\n[store]\npath = "r.sqlite3"\n')
    # the agent: a fake claude in its own session of the private server, tagged SNAP
    agent = f"{sys.executable} -m politerm.testing.fakeagent --mode claude"
    subprocess.run(
        ["tmux", "-L", inner, "new-session", "-d", "-s", "work", "-c", str(root), agent],
        check=True,
    )
    _tmux(inner, "set-option", "-p", "-t", "work", "@poli_agent", "SNAP")
    retry_until(lambda: "? for shortcuts" in _tmux(inner, "capture-pane", "-p", "-t", "work"),
                30, what="the fake agent's first screen")  # fmt: skip
    # the person's terminal: a pane of another tmux server, running poli dash
    outer = f"poli-test-outer-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    dash = f"{sys.executable} -m politerm dash --agent SNAP"
    subprocess.run(
        ["tmux", "-L", outer, "-f", "/dev/null", "new-session", "-d", "-s", "me", "-x", "160",
         "-y", "45", "-c", str(root), dash],
        check=True, env=env,
    )  # fmt: skip
    try:
        retry_until(
            lambda: "? for shortcuts" in _tmux(outer, "capture-pane", "-p", "-t", "me"),
            60,
            what="the dashboard mirroring the agent",
        )
        assert _terminals(inner) == []
        _tmux(outer, "send-keys", "-t", "me", "t")
        retry_until(
            lambda: _terminals(inner) == ["work"],
            30,
            what="a tmux client attached to the agent's session",
        )
        # the person's terminal now shows the real pane, tmux's status line included
        retry_until(
            lambda: "[work]" in _tmux(outer, "capture-pane", "-p", "-t", "me"),
            30,
            what="the agent's session in the person's terminal",
        )
        _tmux(inner, "detach-client", "-s", "work")
        retry_until(
            lambda: (
                "[work]" not in (screen := _tmux(outer, "capture-pane", "-p", "-t", "me"))
                and "? for shortcuts" in screen
            ),
            30,
            what="the dashboard back after detaching",
        )
        _tmux(outer, "send-keys", "-t", "me", "q")
        retry_until(lambda: not _tmux(outer, "list-sessions"), 30, what="poli dash to quit")
    finally:
        _tmux(outer, "kill-server")
