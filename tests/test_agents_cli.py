"""``poli agents``, ``poli agents check`` and ``poli approve`` as real subprocesses."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import typing as t

import psutil
import pytest

from politerm.agents.approval import PendingApproval, get_pending, set_pending
from politerm.store import RunStore

FAKE = [sys.executable, "-m", "politerm.testing.fakeagent"]


def poli(
    *args: str, timeout: float = 90, cwd: pathlib.Path | None = None
) -> subprocess.CompletedProcess[str]:
    # Piped, with no COLUMNS: tables are whole tab-separated rows, never wrapped.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )


def user_agents_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- poli agents ---------------------------------------------------------------------------


def test_agents_lists_profiles_programs_and_versions() -> None:
    udir = user_agents_dir()
    (udir / "nowhere.toml").write_text('command = ["no-such-agent-cli-xyz"]\n')
    (udir / "slow.toml").write_text('command = ["sh"]\nversion_args = ["-c", "sleep 30"]\n')
    result = poli("agents", "--json", "--timeout", "1")
    assert result.returncode == 0, result.stderr
    infos = {i["name"]: i for i in json.loads(result.stdout)}
    for name in ("claude", "codex", "gemini", "opencode", "aider", "aider-raw", "shell", "generic"):
        assert name in infos
    fake = infos["fake-claude"]
    # A bundled profile's `python` is poli's own interpreter (a pipx venv's, say).
    assert fake["program"] == sys.executable and fake["path"]
    assert fake["version"].startswith("politerm fakeagent ")
    assert infos["fake"]["program"] == sys.executable  # the name every workflow takes
    # One list everywhere: what `poli agents` lists is what a bad name is told is known.
    refused = poli("go", "E", "--agent", "nosuch", "--dry-run")
    known = re.search(r"\(known: (.+)\)", refused.stderr)
    assert known is not None, refused.stderr
    assert known[1].split(", ") == sorted(infos)
    assert infos["nowhere"]["path"] is None
    assert infos["nowhere"]["error"] == "not found on PATH"
    # A version run that hangs is bounded and says so.
    assert infos["slow"]["version"] is None
    assert "within 1s" in infos["slow"]["error"]
    assert infos["generic"]["program"] is None
    table = poli("agents", "--timeout", "1")
    assert table.returncode == 0, table.stderr
    assert "fake-claude" in table.stdout and "not found on PATH" in table.stdout


# --- poli agents check ---------------------------------------------------------------------


class CheckCase(t.NamedTuple):
    test_id: str
    profile: str
    scenario: str | None  # None: the profile's own command
    mode: str = ""
    expect: tuple[str, ...] = ()


CHECK_CASES = [
    CheckCase("fake-claude", "fake-claude", None),
    CheckCase(
        "fake-codex-trust-dialog", "fake-codex",
        "trust_dialog = true\nswallow_enter_in_burst = true\n", "codex",
        ("ok: dialog folder-trust: answered with Enter",),
    ),
    # Ignores SIGHUP and runs a child: stopping it takes the whole process tree.
    CheckCase(
        "fake-gemini-tree", "fake-gemini", "ignore_sighup = true\nspawn_child = true\n", "gemini",
        ("process(es) stopped",),
    ),
    CheckCase("fake-plain", "fake-plain", None),
    # Asks to run a tool: the driver's policy denies it (a check runs no tools).
    CheckCase(
        "fake-claude-approval", "fake-claude",
        "[[rules]]\nmatch = 'say hello'\napproval = \"Bash(echo hi > out.txt)\"\n"
        "deny_reply = 'ECHO: say hello'\nreply = 'ran it'\n", "claude",
        (
            "ok: approval: denied Bash(echo hi > out.txt) (read in full) with Escape",
            "state: waiting_approval [",
        ),
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CHECK_CASES, ids=[c.test_id for c in CHECK_CASES])
def test_agents_check_drives_a_fake_agent(case: CheckCase, tmp_path: pathlib.Path) -> None:
    args = ["agents", "check", case.profile, "--prompt", "say hello", "--ready-timeout", "20"]
    args += ["--reply-timeout", "20", "--cwd", str(tmp_path)]
    if case.scenario is not None:
        scenario = tmp_path / "scenario.toml"
        scenario.write_text(f"think_time = 0.2\n{case.scenario}")
        args += ["--command", shlex.join([*FAKE, "--mode", case.mode, "--scenario", str(scenario)])]
    before = {p.pid for p in psutil.process_iter()}
    result = poli(*args)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert out.rstrip().endswith(f"{case.profile}: works")
    for step in ("start", "ready", "delivery", "reply", "stop"):
        assert f"ok: {step}:" in out, out
    assert "state: ready [" in out
    assert "ECHO: say hello" in out
    for text in case.expect:
        assert text in out, out
    stopped = out.split("process(es) stopped: ")[1].split("\n")[0]
    pids = [int(p) for p in stopped.split(", ")]
    assert pids and not set(pids) & before
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_agents_check_reports_an_agent_that_exits(tmp_path: pathlib.Path) -> None:
    result = poli(
        "agents", "check", "fake-claude", "--command", "sh -c 'echo broken; exit 3'",
        "--ready-timeout", "10", "--cwd", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    # The exit status comes from tmux's #{pane_dead_status}, which tmux 3.3a sometimes never
    # fills in (it does not always reap the pane's child); the exit itself is always seen.
    assert "FAIL: ready: exited: exit status " in result.stdout
    assert "exit status 3" in result.stdout or "exit status ?" in result.stdout
    assert "broken" in result.stdout  # the agent's last screen is the evidence
    assert result.stdout.rstrip().endswith("fake-claude: FAILED")


def test_agents_check_unknown_profile() -> None:
    result = poli("agents", "check", "no-such-profile")
    assert result.returncode == 1
    assert result.stderr.startswith("poli: no agent profile 'no-such-profile' (known: ")


# --- poli approve and poli status --------------------------------------------------------


def test_approve_answers_a_pending_question(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    store = RunStore.open(tmp_path / "runs.sqlite3")
    try:
        result = poli("approve", "EXECUTER", cwd=tmp_path)
        assert result.returncode == 1
        assert "agent EXECUTER has no approval question waiting" in result.stderr
        store.upsert_agent(
            "EXECUTER", session="poli", pane_id="%1", command="codex", cwd=str(tmp_path),
            profile="codex", resume_command=None, env=None,
        )  # fmt: skip
        evidence = ("Would you like to run the following command?", "$ echo hi > out.txt")
        set_pending(store, PendingApproval("EXECUTER", "", "echo hi > out.txt", evidence, 1.0))
        status = json.loads(poli("status", "--json", cwd=tmp_path).stdout)
        assert status["approvals"] == [
            {
                "agent": "EXECUTER", "tool": "", "command": "echo hi > out.txt",
                "question": "", "what": "echo hi > out.txt", "asked": 1.0, "answer": None,
                "evidence": list(evidence),
            }
        ]  # fmt: skip
        shown = poli("status", cwd=tmp_path).stdout
        assert "approval questions waiting" in shown and "echo hi > out.txt" in shown
        result = poli("approve", "executer", "--deny", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "denied: EXECUTER may not run echo hi > out.txt"
        pending = get_pending(store, "EXECUTER")
        assert pending is not None and pending.answer is not None
        assert pending.answer.value == "deny"
        [event] = [e for e in store.list_events() if e.kind == "approval-answer"]
        assert event.agent == "EXECUTER" and event.data["decision"] == "deny"
        result = poli("approve", "NOBODY", cwd=tmp_path)
        assert result.returncode == 1 and "no agent named 'NOBODY'" in result.stderr
    finally:
        store.close()
