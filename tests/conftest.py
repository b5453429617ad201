"""Shared fixtures: every test gets its own HOME and a plain shell, so prompts don't flake."""

from __future__ import annotations

import typing as t

import pytest

from politerm.tmux import ControlClient, TmuxServer

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SHELL", "/bin/sh")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.delenv("TMUX_PANE", raising=False)
    for var in (
        "PLANNER_CMD",
        "PLANNER_CWD",
        "EXECUTER_CMD",
        "EXECUTER_CWD",
        "POLI_TMUX_SOCKET",
        "POLI_TMUX_SESSION",
        "POLI_PLAN_TIMEOUT",
        "POLI_EXEC_TIMEOUT",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def tmux_server(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> t.AsyncIterator[TmuxServer]:
    """Our private server on the libtmux plugin's per-test socket (reaped after the test)."""
    assert server.socket_name is not None
    srv = TmuxServer(server.socket_name, config_dir=tmp_path / "tmuxconf")
    yield srv
    await srv.close()


@pytest.fixture
async def tmux_session(tmux_server: TmuxServer) -> t.AsyncIterator[ControlClient]:
    """A session ``t`` on the private server and its control-mode connection."""
    await tmux_server.ensure_session("t")
    client = await tmux_server.connect("t")
    yield client
