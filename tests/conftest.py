"""Shared fixtures: every test gets its own HOME and a plain shell, so prompts don't flake.

The suite runs in parallel (pytest-xdist, ``scripts/test``): each worker process gets its own
tmux socket directory (``TMUX_TMPDIR``), every test its own HOME and tmux server, and every
listener binds port 0, so tests need no care about one another. ``--quick`` runs the fast
subset (no real CLIs, no test marked ``slow``); slow tests are scheduled first so that a
parallel run does not end waiting on one of them.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import typing as t

import pytest

from politerm.tmux import ControlClient, TmuxServer

if t.TYPE_CHECKING:
    import libtmux

# Tests that ask for more than the ini's hard ceiling (``timeout``) are slow by declaration.
_CEILING_KEY = "timeout"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="run the fast subset: leave out the real-CLI tests and tests marked slow",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes minutes or waits on wall-clock time; left out by --quick"
    )
    # One tmux socket directory per pytest process (each xdist worker, or the lone process):
    # every tmux server a test starts, even on a fixed name like the default ``poli``, is
    # private to this process and reaped at its end.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    sockets = pathlib.Path(tempfile.mkdtemp(prefix=f"poli-tmux-{worker}-", dir="/tmp"))
    config.stash[_SOCKETS] = sockets
    os.environ["TMUX_TMPDIR"] = str(sockets)


def pytest_unconfigure(config: pytest.Config) -> None:
    sockets = config.stash.get(_SOCKETS, None)
    if sockets is None:
        return
    # A test that failed before its teardown may have left a server: end it with the run.
    for sock in sockets.glob("tmux-*/*"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            cmd = ["tmux", "-S", str(sock), "kill-server"]
            subprocess.run(cmd, check=False, capture_output=True, timeout=10)
    shutil.rmtree(sockets, ignore_errors=True)


_SOCKETS = pytest.StashKey[pathlib.Path]()


def _is_slow(item: pytest.Item, ceiling: float) -> bool:
    if item.get_closest_marker("slow") or item.get_closest_marker("realcli"):
        return True
    mark = item.get_closest_marker("timeout")
    return bool(mark and mark.args and float(mark.args[0]) > ceiling)


# Before xdist's own hook, which reads the ``xdist_group`` marks to schedule by group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ceiling = float(config.getini(_CEILING_KEY) or 0) or float("inf")
    slow = {id(item) for item in items if _is_slow(item, ceiling)}
    if config.getoption("--quick"):
        left_out = [item for item in items if id(item) in slow]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if id(item) not in slow]
        return
    # The real CLIs run one at a time, as they do alone: each start costs seconds of CPU, and
    # with four of them at once on 2 cores aider's turns missed their bounds (12 of 94 failed).
    # The ones that mostly wait out a clock (a limit's reset, a CLI's own retries: 5 minutes
    # of one CPU-idle wait) are a second line beside them, so the serial line is shorter.
    for item in items:
        if item.get_closest_marker("realcli"):
            clock = item.get_closest_marker("clock") is not None
            item.add_marker(pytest.mark.xdist_group("realcli-clock" if clock else "realcli"))
    # Longest first (a stable sort: the same order in every xdist worker).
    items.sort(key=lambda item: id(item) not in slow)


_SPENT: dict[str, float] = {}
"""Seconds spent in tests by xdist group, summed by the process that reports them."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under xdist the controller sees every worker's reports; a grouped test's id ends in
    # "@group". The sums say which group bounds the run's wall time (issue 25).
    group = report.nodeid.rpartition("@")[2] if "@" in report.nodeid else "(ungrouped)"
    _SPENT[group] = _SPENT.get(group, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: t.Any) -> None:
    if _SPENT:
        sums = ", ".join(f"{group} {secs:.0f} s" for group, secs in sorted(_SPENT.items()))
        terminalreporter.write_line(f"time in tests by xdist group: {sums}")


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
    # An xdist worker runs with COLUMNS=80 and LINES=24; a tmux server started here would
    # hand them to every pane, and an agent would draw for 80 columns in a wider pane.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    for var in (
        "PLANNER_CMD",
        "PLANNER_CWD",
        "EXECUTER_CMD",
        "EXECUTER_CWD",
        "POLI_TMUX_SOCKET",
        "POLI_TMUX_SESSION",
        "POLI_PLAN_TIMEOUT",
        "POLI_EXEC_TIMEOUT",
        "POLI_FLEET_NODE",
        "POLI_FLEET_PASSWORD",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def short_dir() -> t.Iterator[pathlib.Path]:
    """A private directory with a short path, for Unix sockets, removed after the test.

    A socket's path must fit in 107 bytes (``sun_path``); ``tmp_path`` under an xdist worker
    (``/tmp/pytest-of-USER/pytest-N/popen-gwN/<test name>/``) leaves too little for
    ``tmux-UID/<socket name>`` below it.
    """
    path = pathlib.Path(tempfile.mkdtemp(prefix="poli-s-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
