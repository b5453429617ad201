"""``poli doctor`` as a real subprocess, against real (and deliberately broken) binaries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from politerm.doctor import (
    CheckResult,
    DoctorContext,
    Status,
    check_python_deps,
    check_socket_dir,
    exit_code,
    run_checks,
)
from politerm.ui.web import assets

REAL_TMUX = shutil.which("tmux")


@pytest.fixture
def _real_tmux() -> None:
    # Never a silent skip: a machine without tmux fails these tests, saying why.
    if REAL_TMUX is None:
        pytest.fail("tmux is not installed: install tmux >= 3.2 (apt-get install -y tmux)")


needs_tmux = pytest.mark.usefixtures("_real_tmux")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The test's environment (HOME etc. already isolated) with a private TMUX_TMPDIR."""
    tmpdir = tmp_path / "tmux-tmp"
    tmpdir.mkdir(mode=0o700)
    return {
        **os.environ,
        "TMUX_TMPDIR": str(tmpdir),
        "COLUMNS": "400",  # rich wraps long fix hints at 80 columns otherwise
        "NO_COLOR": "1",
    }


def poli_doctor(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", "doctor", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def rows_of(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return {row["check"]: row for row in rows}


def write_script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@needs_tmux
def test_healthy_machine_exits_0(env: dict[str, str], tmp_path: Path) -> None:
    result = poli_doctor(env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    for check in ("tmux", "socket dir", "config", "agent PLANNER", "agent EXECUTER"):
        assert check in result.stdout


@needs_tmux
def test_json_output_parses(env: dict[str, str], tmp_path: Path) -> None:
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(result)
    assert set(rows) >= {"tmux", "socket dir", "config", "agent PLANNER", "python deps"}
    for row in rows.values():
        assert set(row) == {"check", "status", "detail", "fix"}
        assert row["status"] in {"OK", "WARN"}
    assert rows["agent PLANNER"]["detail"].startswith(sys.executable)


def test_tmux_missing_fails_with_install_hint(env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env["PATH"] = str(bin_dir)
    result = poli_doctor(env, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tmux not found on PATH" in result.stdout
    assert "apt-get install -y tmux" in result.stdout


def test_tmux_too_old(env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "tmux", 'echo "tmux 2.9"')
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1
    row = rows_of(result)["tmux"]
    assert row["status"] == "FAIL"
    assert "tmux 2.9" in row["detail"]
    assert "too old" in row["detail"]
    assert "tmux >= 3.2" in row["fix"]


@needs_tmux
def test_socket_dir_with_wrong_mode(env: dict[str, str], tmp_path: Path) -> None:
    socket_dir = Path(env["TMUX_TMPDIR"]) / f"tmux-{os.getuid()}"
    socket_dir.mkdir()
    socket_dir.chmod(0o755)
    result = poli_doctor(env, cwd=tmp_path)
    assert result.returncode == 1
    assert f"chmod 700 {socket_dir}" in result.stdout
    row = rows_of(poli_doctor(env, "--json", cwd=tmp_path))["socket dir"]
    assert row["status"] == "FAIL"
    assert "0755" in row["detail"]


@needs_tmux
def test_hanging_agent_fails_within_the_timeout(env: dict[str, str], tmp_path: Path) -> None:
    # The probe hangs for 10 minutes: doctor answering within poli_doctor's 60 s bound at
    # all proves it gave up on it at its own timeout.
    hang = write_script(tmp_path / "hangs", "sleep 600")
    env["PLANNER_CMD"] = str(hang)
    env["POLI_DOCTOR_TIMEOUT"] = "1"
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1
    row = rows_of(result)["agent PLANNER"]
    assert row["status"] == "FAIL"
    assert "hangs (no answer within 1s)" in row["detail"]


@needs_tmux
def test_agent_missing_from_path(env: dict[str, str], tmp_path: Path) -> None:
    env["EXECUTER_CMD"] = "no-such-agent-xyz --flag"
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1
    row = rows_of(result)["agent EXECUTER"]
    assert row["status"] == "FAIL"
    assert "no-such-agent-xyz not found on PATH" in row["detail"]
    assert row["fix"] == (
        "install no-such-agent-xyz, or set agents.EXECUTER.command in poli.toml "
        "or the EXECUTER_CMD environment variable"
    )


def bare_path(tmp_path: Path) -> str:
    """A PATH holding only tmux and python: no agent CLI is found on it, on any machine."""
    bin_dir = tmp_path / "barebin"
    bin_dir.mkdir()
    assert REAL_TMUX is not None
    (bin_dir / "tmux").symlink_to(REAL_TMUX)
    (bin_dir / "python").symlink_to(sys.executable)
    return str(bin_dir)


@needs_tmux
def test_epic_agent_default_missing_warns_chosen_missing_fails(
    env: dict[str, str], tmp_path: Path
) -> None:
    env["PATH"] = bare_path(tmp_path)
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    row = rows_of(result)["epic agent"]
    assert (row["status"], row["detail"]) == (
        "WARN",
        "codex not found on PATH; `poli go` needs it (default [epic] agent)",
    )
    assert "set [epic] agent (and [epic.commands] codex) in poli.toml" in row["fix"]
    assert "poli go EPIC --agent NAME" in row["fix"]
    (tmp_path / "poli.toml").write_text('[epic]\nagent = "gemini"\n')
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1
    row = rows_of(result)["epic agent"]
    assert (row["status"], row["detail"]) == ("FAIL", "gemini not found on PATH")
    fake = [sys.executable, "-m", "politerm.testing.fakeagent"]
    (tmp_path / "poli.toml").write_text(
        f'[epic]\nagent = "fake"\n[epic.commands]\nfake = {json.dumps(fake)}\n'
    )
    row = rows_of(poli_doctor(env, "--json", cwd=tmp_path))["epic agent"]
    assert row["status"] == "OK"
    assert row["detail"].startswith(f"fake: {sys.executable} (Python ")


@needs_tmux
def test_pipeline_clis_of_the_project_fail_built_in_ones_warn(
    env: dict[str, str], tmp_path: Path
) -> None:
    env["PATH"] = bare_path(tmp_path)
    rows = rows_of(poli_doctor(env, "--json", cwd=tmp_path))
    claude = rows["pipeline cli claude"]
    assert claude["status"] == "WARN"
    assert claude["detail"].startswith("claude not found on PATH; used by bugfix (builtin)")
    assert "--cli fake" in claude["fix"]
    pipelines = tmp_path / ".poli" / "pipelines"
    pipelines.mkdir(parents=True)
    (pipelines / "mine.pipeline").write_text(
        "name: mine\ndescription: d\ntimeout_min: 5\n"
        "1 | developer | gemini | auto | - | - | Write it.\n"
        "2 | reviewer  | fake   | auto | - | - | Review it.\n"
    )
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    rows = rows_of(result)
    assert rows["pipelines"]["status"] == "OK", rows["pipelines"]
    gemini = rows["pipeline cli gemini"]
    assert (gemini["status"], gemini["detail"]) == (
        "FAIL",
        "gemini not found on PATH; used by mine (project)",
    )
    assert "pipeline cli fake" not in rows  # the bundled fake agent is always there
    assert rows["pipeline cli claude"]["status"] == "WARN"


@needs_tmux
def test_agent_without_version_flag_warns(env: dict[str, str], tmp_path: Path) -> None:
    env["PLANNER_CMD"] = str(write_script(tmp_path / "noversion", 'echo "bad flag" >&2; exit 2'))
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 0
    row = rows_of(result)["agent PLANNER"]
    assert row["status"] == "WARN"
    assert "exited 2: bad flag" in row["detail"]


@needs_tmux
def test_bad_config_is_a_fail_row(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "poli.toml").write_text('[timeouts]\nplan = "abc"\n')
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1
    rows = rows_of(result)
    assert rows["config"]["status"] == "FAIL"
    assert rows["config"]["detail"] == (
        "poli.toml: timeouts.plan: expected a number of seconds > 0, got 'abc'"
    )
    assert rows["agents"]["status"] == "WARN"


@needs_tmux
@pytest.mark.parametrize(
    ("files", "want"),
    [
        (
            {"poli.toml": '[agents.PLANNER]\ncommand = "claude"\nprofile = "nosuch"\n'},
            "agents.PLANNER.profile: no agent profile 'nosuch'",
        ),
        ({"poli.toml": '[templates]\nplan = "gone.txt"\n'}, "templates.plan: cannot read"),
        (
            {"poli.toml": '[templates]\nplan = "t.txt"\n', "t.txt": "{nosuchfield}\n"},
            "templates.plan: unknown field",
        ),
        ({"poli.toml/": ""}, "poli.toml: is a directory, not a config file"),
    ],
    ids=["unknown-profile", "missing-template", "broken-template", "config-is-a-directory"],
)
def test_profiles_and_templates_are_checked_before_any_agent_starts(
    env: dict[str, str], tmp_path: Path, files: dict[str, str], want: str
) -> None:
    for name, text in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(text)
    result = poli_doctor(env, "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = json.loads(result.stdout)
    failed = [r["detail"] for r in rows if r["status"] == "FAIL"]
    assert any(want in d for d in failed), failed
    # A broken poli.toml is named by every check that reads it, never "check crashed".
    assert not [d for d in failed if "crashed" in d], failed
    config = subprocess.run(
        [sys.executable, "-m", "politerm", "config"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert config.returncode == 1 and want in config.stderr, config.stderr
    assert config.stderr.count("\n") == 1 and "Traceback" not in config.stderr
    # Nothing was started: the session's tmux server is not running.
    tmux_dir = Path(env["TMUX_TMPDIR"])
    assert not [p for p in tmux_dir.rglob("*") if p.is_socket()]


@needs_tmux
def test_explicit_config_option(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "other.toml"
    config.write_text('[tmux]\nsocket = "elsewhere"\n')
    rows = rows_of(poli_doctor(env, "--json", "--config", str(config), cwd=tmp_path))
    assert rows["config"]["status"] == "OK"
    assert str(config) in rows["config"]["detail"] or "other.toml" in rows["config"]["detail"]
    assert rows["socket dir"]["detail"].endswith("/elsewhere")
    missing = poli_doctor(env, "--json", "--config", str(tmp_path / "nope.toml"), cwd=tmp_path)
    assert missing.returncode == 1
    assert "config file not found" in rows_of(missing)["config"]["detail"]


def test_bad_timeout_variable_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    env["POLI_DOCTOR_TIMEOUT"] = "soon"
    result = poli_doctor(env, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "poli: POLI_DOCTOR_TIMEOUT: expected a number of seconds > 0, got 'soon'"
    )


# --- the library, without the CLI -------------------------------------------------------


def test_checks_are_extensible_and_crashes_are_contained(tmp_path: Path) -> None:
    def check_pipelines(ctx: DoctorContext) -> t.Iterable[CheckResult]:
        return [CheckResult("pipelines", Status.WARN, "2 pipelines, 1 unused")]

    def check_broken(ctx: DoctorContext) -> t.Iterable[CheckResult]:
        msg = "boom"
        raise RuntimeError(msg)

    ctx = DoctorContext(env={"TMUX_TMPDIR": str(tmp_path)}, project_dir=tmp_path)
    rows = run_checks(ctx, [check_socket_dir, check_pipelines, check_broken])
    assert [(r.check, r.status) for r in rows] == [
        ("socket dir", Status.OK),
        ("pipelines", Status.WARN),
        ("broken", Status.FAIL),
    ]
    assert "boom" in rows[2].detail
    assert exit_code(rows) == 1
    assert exit_code(rows[:2]) == 0


def test_socket_dir_owned_and_private(tmp_path: Path) -> None:
    directory = tmp_path / f"tmux-{os.getuid()}"
    directory.mkdir(mode=0o700)
    directory.chmod(0o700)
    ctx = DoctorContext(env={"TMUX_TMPDIR": str(tmp_path)}, project_dir=tmp_path)
    (row,) = check_socket_dir(ctx)
    assert row.status is Status.OK
    assert "mode 0700" in row.detail
    directory.rmdir()
    directory.write_text("not a dir")
    (row,) = check_socket_dir(ctx)
    assert row.status is Status.FAIL
    assert "not a directory" in row.detail


def test_python_deps_are_installed() -> None:
    (row,) = check_python_deps(DoctorContext(env={}))
    assert row.status in {Status.OK, Status.WARN}


# --- what the views need ----------------------------------------------------------------


@needs_tmux
def test_a_poli_web_that_cannot_start_is_said_with_how_to_fix(
    env: dict[str, str], tmp_path: Path
) -> None:
    rows = rows_of(poli_doctor(env, "--json", cwd=tmp_path))
    assert rows["poli web"]["status"] == "OK", rows["poli web"]
    assert rows["poli web"]["detail"].startswith("xterm.js and its fonts in ")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = poli_doctor({**env, "POLI_WEB_ASSETS": str(empty)}, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # poli web is not all of politerm: it warns
    row = rows_of(result)["poli web"]
    assert row["status"] == "WARN"
    assert row["detail"] == f"cannot start: xterm.js and its fonts are not in {empty}/node_modules"
    assert row["fix"] == f"run `python -m politerm.ui.web {empty}`, or unset POLI_WEB_ASSETS"
    # without the setting, this checkout's own place (an installed wheel's: tests/test_wheel.py)
    assert "python -m politerm.ui.web .cache/web" in assets.how_to_install({})


@needs_tmux
def test_poli_dash_without_a_terminal_warns(env: dict[str, str], tmp_path: Path) -> None:
    row = rows_of(poli_doctor({**env, "TERM": "dumb"}, "--json", cwd=tmp_path))["poli dash"]
    assert row["status"] == "WARN"
    assert "TERM is dumb: poli dash needs a real terminal" in row["detail"]
    rows = rows_of(poli_doctor({**env, "TERM": "xterm-256color"}, "--json", cwd=tmp_path))
    assert rows["poli dash"]["status"] == "OK"


@needs_tmux
async def test_desktop_notices_without_a_session_bus_warn(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.ui.notifybus import desktop

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    bare = {k: v for k, v in env.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY")} | {
        "XDG_RUNTIME_DIR": str(runtime)
    }
    row = rows_of(poli_doctor(bare, "--json", cwd=tmp_path))["desktop notices"]
    assert row["status"] == "WARN"
    assert row["detail"].startswith("no desktop session bus (no DBUS_SESSION_BUS_ADDRESS, no ")
    assert "[notify] desktop = false" in row["fix"]
    # a real session bus (dbus-daemon, as a desktop has): fine
    async with desktop(monkeypatch):
        with_bus = {**bare, "DBUS_SESSION_BUS_ADDRESS": os.environ["DBUS_SESSION_BUS_ADDRESS"]}
        row = rows_of(poli_doctor(with_bus, "--json", cwd=tmp_path))["desktop notices"]
    assert (row["status"], row["detail"]) == ("OK", "notify-send and a session bus"), row
    # desktop notices turned off: nothing to warn about
    (tmp_path / "poli.toml").write_text("[notify]\ndesktop = false\n")
    row = rows_of(poli_doctor(bare, "--json", cwd=tmp_path))["desktop notices"]
    assert (row["status"], row["detail"]) == ("OK", "off ([notify] desktop = false)"), row
