"""``poli agents canary`` on the pinned local install (CI never installs the newest releases).

The command's whole path runs: the binary's version asked, its checks (ready, deliver,
block, approval, two turns, then the loop's: a tall command and two tasks under ask +
patterns) against a loopback model server, the table printed. Bad input
is a one-line error, and a broken check's screen lines are shown under the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

import pytest

from politerm.canary import CHECKS, CanaryResult, CheckResult, render

if t.TYPE_CHECKING:
    import pathlib

    from tests.realcli.install import Installed

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(600)]


def poli(*args: str, home: pathlib.Path, timeout: float = 500) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_canary_runs_every_check_on_a_pinned_install(
    installed: Installed, tmp_path: pathlib.Path
) -> None:
    binary = installed.bins["claude"]
    proc = poli("agents", "canary", "claude", "--bin", f"claude={binary}", home=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("claude"))
    assert installed.versions["claude"] in row
    assert row.split()[2:] == ["ok"] * len(CHECKS), row
    for check in CHECKS:
        assert f"claude {installed.versions['claude']}: {check}: ok" in proc.stderr
    # The loop ran, under ask + patterns, with nobody to answer: both tasks done.
    assert {"tall loop", "two tasks"} <= set(CHECKS)
    assert f"claude {installed.versions['claude']}: tall loop: ok: task done" in proc.stderr
    assert f"claude {installed.versions['claude']}: two tasks: ok: task done" in proc.stderr

    as_json = poli(
        "agents", "canary", "claude", "--bin", f"claude={binary}", "--json", home=tmp_path
    )
    assert as_json.returncode == 0, as_json.stderr
    (result,) = json.loads(as_json.stdout)
    assert result["version"] == installed.versions["claude"]
    assert all(result["checks"][c]["ok"] for c in CHECKS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchcli"], "no canary recipe for 'nosuchcli'"),
        (["claude", "--bin", "claude"], "expected CLI=PATH"),
    ],
)
def test_canary_bad_input_is_one_line(
    args: list[str], message: str, tmp_path: pathlib.Path
) -> None:
    proc = poli("agents", "canary", *args, home=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_broken_check_shows_the_screen_lines() -> None:
    from rich.console import Console

    broken = CanaryResult("codex", "9.9.9")
    broken.checks["ready"] = CheckResult("ready", True, "ok")
    broken.checks["deliver"] = CheckResult(
        "deliver",
        False,
        "stranded [text left in the box]",
        ("› Say hello \x1b[31mred", "-> read unknown (no match)"),
    )
    console = Console(width=160, record=True)
    console.print(render([broken]))
    text = console.export_text()
    assert "codex" in text and "FAIL" in text
    assert "codex 9.9.9: deliver: stranded [text left in the box]" in text
    assert "| › Say hello" in text and "-> read unknown (no match)" in text
    assert "\x1b" not in text
