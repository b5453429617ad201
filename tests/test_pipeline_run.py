"""Pipelines end to end: `poli run --cli fake` on real tmux, real fake agents, real git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import typing as t

import psutil

from politerm.hooks.channel import create_channel
from politerm.pipeline.state import read_question, read_state_file, steps_dir
from politerm.store import RunStore
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

RUN = "R1"


def make_project(tmp_path: pathlib.Path, server: libtmux.Server, steps: str) -> pathlib.Path:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    (root / ".poli" / "pipelines").mkdir(parents=True)
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\n\n[store]\npath = "runs.sqlite3"\n\n'
        "[timeouts]\nready = 20\n"
    )
    (root / ".poli" / "pipelines" / "p.pipeline").write_text(
        "name: p\ndescription: test pipeline\ntimeout_min: 1\n\n" + steps
    )
    return root


def poli(root: pathlib.Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def start(root: pathlib.Path, *args: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "politerm", "run", "p", "--project", str(root),
            "--task", "Add a greeting", "--cli", "fake", "--run-id", RUN, *args]  # fmt: skip
    out = (root / "run.out").open("wb")
    return subprocess.Popen(argv, cwd=root, stdout=out, stderr=subprocess.STDOUT)


def output(root: pathlib.Path) -> str:
    return (root / "run.out").read_text()


def events(root: pathlib.Path, step: int) -> list[dict[str, t.Any]]:
    """Every fake-agent event of a step, over all its attempts."""
    logs = sorted((root / ".poli" / "steps" / RUN).glob(f"step-{step}.a*.jsonl"))
    return [e for path in logs for e in read_log(path)]


def count(root: pathlib.Path, step: int, kind: str) -> int:
    return sum(1 for e in events(root, step) if e["event"] == kind)


def question(root: pathlib.Path) -> dict[str, t.Any] | None:
    with RunStore.open(root / "runs.sqlite3") as store:
        q = read_question(store, RUN)
    return q if q is not None and q.get("answer") is None else None


def wait_question(root: pathlib.Path, step: int, kind: str) -> dict[str, t.Any]:
    def asked() -> dict[str, t.Any] | None:
        q = question(root)
        return q if q is not None and (q["step"], q["kind"]) == (step, kind) else None

    return retry_until(asked, 40, interval=0.1, what=f"a {kind} question about step {step}")


def finish(proc: subprocess.Popen[bytes], root: pathlib.Path, seconds: float = 60) -> int:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(output(root)) from None


def state(root: pathlib.Path) -> dict[str, str]:
    return read_state_file(root / ".poli" / f"state.{RUN}")


def test_full_pipeline_gates_parallel_handoff_and_retry(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(
        tmp_path,
        server,
        "1 | tester    | - | auto | -   | - | Plan the tests\n"
        "2 | architect | - | gate | -   | - | Design it\n"
        "3 | developer | - | auto | dev | - | Backend part\n"
        "4 | tester    | - | auto | dev | - | Frontend part\n"
        "5 | developer | - | gate | -   | - | Fix it FAKE:crash-once FAKE:write=fix.txt\n",
    )
    proc = start(root, "--on-fail", "retry:1", "--keep")
    try:
        wait_question(root, 2, "gate")
        assert state(root)["step_2"] == "done" and "step_3" in state(root)
        assert count(root, 3, "prompt") == 0  # the gate holds the pipeline
        gate = poli(root, "gate", "y", "--project", str(root))
        assert gate.returncode == 0, gate.stderr
        assert gate.stdout.strip() == "step 2: answered y"
        q = wait_question(root, 5, "gate")
        assert "Approve? [y/n/r/s]" in q["question"]
        assert ".." not in q["question"], q["question"]  # the report's full stop is not doubled
        session = f"poli-proj-{RUN}"

        def control_asks() -> bool:
            screen = server.cmd("capture-pane", "-p", "-t", f"{session}:0").stdout
            return any("press y, n, r or s" in line for line in screen)

        retry_until(control_asks, 60, what="the control window to show the question")
        # The control window answers the same question from the keyboard.
        server.cmd("send-keys", "-t", f"{session}:0", "y")
        assert finish(proc, root) == 0, output(root)
    finally:
        proc.kill()
    text = output(root)
    assert "step 5 (developer) failed: the agent exited (exit status" in text
    assert "step 5: retrying" in text and f"run {RUN}: done" in text
    # Every step ran to completion exactly once; step 5 crashed once before that.
    assert [count(root, n, "reply") for n in range(1, 6)] == [1, 1, 1, 1, 1]
    assert count(root, 5, "crash") == 1 and count(root, 5, "prompt") == 2
    handoff = (root / ".handoff.md").read_text()
    first = handoff.index("## Parallel Step 3 (developer) — ")
    assert first < handoff.index("## Parallel Step 4 (tester) — ")
    assert "Notes from step 3 (attempt 1): done." in handoff[first:]
    assert (root / ".handoff-step-3.md").exists() and (root / ".handoff-step-4.md").exists()
    st = state(root)
    assert st["status"] == "done" and st["session"] == session and st["run_id"] == RUN
    assert [st[f"step_{n}"] for n in range(1, 6)] == ["done"] * 5
    windows = server.cmd("list-windows", "-t", session, "-F", "#{window_name}").stdout
    assert windows == ["control", "step-1-tester", "step-2-architect", "step-3-developer",
                       "step-4-tester", "step-5-developer"]  # fmt: skip
    status = json.loads(poli(root, "status", "--project", str(root), "--json").stdout)
    (run,) = status["pipelines"]
    assert run["status"] == "done" and [s["status"] for s in run["steps"]] == ["done"] * 5
    with RunStore.open(root / "runs.sqlite3") as store:
        answers = [e.detail for e in store.list_events(limit=500) if e.kind == "gate-answer"]
    assert answers == ["y (from poli gate)", "y (from control window)"]
    # A finished run cannot be aborted; its kept session is closed with poli down --run-id.
    refused = poli(root, "abort", "--run-id", RUN, "--project", str(root))
    assert refused.returncode == 1
    assert f"run {RUN} has already ended (done)" in refused.stderr
    assert f"poli down --run-id {RUN}" in refused.stderr
    # Its steps' hook channels (the fake agents have no hooks: one made as a step's would
    # be) are kept while the session is, and go with it.
    hooks = steps_dir(root, RUN) / "hooks"
    create_channel(hooks, "step-1")
    down = poli(root, "down", "--run-id", RUN, "--project", str(root))
    assert down.returncode == 0, down.stderr
    assert session not in server.cmd("list-sessions", "-F", "#{session_name}").stdout
    assert not hooks.exists() and steps_dir(root, RUN).is_dir()
    again = poli(root, "down", "--run-id", RUN, "--project", str(root))
    assert again.returncode == 1 and "no session left" in again.stderr


def test_worktrees_merge_in_order_and_a_conflict_becomes_a_gate(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(
        tmp_path,
        server,
        "1 | developer | - | auto | dev | - | Change it FAKE:write=file.txt\n"
        "2 | tester    | - | auto | dev | - | Change it too FAKE:write=file.txt\n"
        "3 | developer | - | auto | dev | - | Add notes FAKE:write=notes.txt\n"
        "4 | reviewer  | - | auto | -   | - | Review\n",
    )
    # Only the test's own files are ignored: the run keeps .poli/ and its handoff files
    # out of git status by itself.
    (root / ".gitignore").write_text("runs.sqlite3*\nrun.out\n")
    (root / "file.txt").write_text("base\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, env=env)
    proc = start(root, "--worktrees")
    try:
        q = wait_question(root, 2, "conflict")
        assert "file.txt" in q["question"]
        assert (root / "file.txt").read_text().startswith("<<<<<<<")  # left for a person
        gate = poli(root, "gate", "s", "--project", str(root), "--run-id", RUN)
        assert gate.returncode == 0, gate.stderr
        assert finish(proc, root) == 0, output(root)
    finally:
        proc.kill()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    assert (root / "file.txt").read_text() == "changed by step 1\n"
    assert (root / "notes.txt").read_text() == "changed by step 3\n"
    merges = git("log", "--merges", "--format=%s").splitlines()
    assert merges == [f"poli: merge poli/{RUN}/step-3", f"poli: merge poli/{RUN}/step-1"]
    assert f"poli/{RUN}/step-2" in git("branch", "--list")  # the skipped branch is kept
    assert git("status", "--porcelain") == ""
    assert not (root / ".poli" / "worktrees" / RUN / "step-1").exists()
    step4 = [e for e in events(root, 4) if e["event"] == "start"]
    assert step4[0]["cwd"] == str(root)
    assert count(root, 4, "reply") == 1


def test_abort_kills_the_session_and_every_agent_and_removes_the_files(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(
        tmp_path, server, "1 | developer | - | auto | - | - | Work forever FAKE:hang\n"
    )
    proc = start(root)
    try:
        retry_until(lambda: count(root, 1, "prompt"), 60, what="step 1 to get its prompt")
        pid = next(e["pid"] for e in events(root, 1) if e["event"] == "start")
        out = poli(root, "abort", "--run-id", RUN, "--project", str(root))
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"aborted run {RUN}"
        assert finish(proc, root, 30) == 130  # the runner saved its state and stopped
    finally:
        proc.kill()
    retry_until(lambda: not psutil.pid_exists(pid), 10, what="the agent process to be gone")
    sessions = server.cmd("list-sessions", "-F", "#{session_name}").stdout
    assert f"poli-proj-{RUN}" not in sessions
    assert not (root / ".poli" / f"state.{RUN}").exists()
    assert not (root / ".poli" / "steps" / RUN).exists()
    with RunStore.open(root / "runs.sqlite3") as store:
        record = json.loads(store.get_meta(f"pipeline.run:{RUN}") or "{}")
    assert record["status"] == "aborted"


def test_kill_9_then_resume_runs_no_step_twice_and_skips_none(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(
        tmp_path,
        server,
        "1 | tester    | - | auto | - | - | One\n"
        "2 | developer | - | auto | - | - | Two FAKE:slow\n"
        "3 | reviewer  | - | auto | - | - | Three\n",
    )
    proc = start(root)
    try:
        retry_until(lambda: count(root, 2, "prompt"), 60, what="step 2 to get its prompt")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert state(root)["step_2"] == "running" and "step_3" in state(root)
    resumed = poli(root, "resume", "--project", str(root), timeout=90)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step 2: re-attached to window step-2-developer" in resumed.stdout
    # The killed runner's step kept running and finished; nothing ran twice, nothing skipped.
    assert [count(root, n, "prompt") for n in (1, 2, 3)] == [1, 1, 1]
    assert [count(root, n, "reply") for n in (1, 2, 3)] == [1, 1, 1]
    assert [state(root)[f"step_{n}"] for n in (1, 2, 3)] == ["done"] * 3
    # One prompt per step in the journal of turns (the killed runner's goes on in its row),
    # each step's record pointing to its own.
    with RunStore.open(root / "runs.sqlite3") as store:
        record = json.loads(store.get_meta(f"pipeline.run:{RUN}") or "{}")
        rows = [store.journal_of("pipeline-step", (RUN, n)) for n in (1, 2, 3)]
        assert store.journal_open() == []
    assert [[(r.state.value, r.outcome) for r in each] for each in rows] == [
        [("ended", "answered")]
    ] * 3
    assert [record["steps"][str(n)]["turn_id"] for n in (1, 2, 3)] == [e[0].id for e in rows]
    again = poli(root, "resume", "--project", str(root))
    assert again.returncode == 1 and "already ended (done)" in again.stderr


def test_headless_steps_complete_by_exit_code(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = make_project(
        tmp_path,
        server,
        "1 | developer | - | auto | - | - | Flaky FAKE:crash-once\n"
        "2 | tester    | - | auto | - | - | Check\n",
    )
    proc = start(root, "--headless", "--on-fail", "retry:1")
    try:
        assert finish(proc, root) == 0, output(root)
    finally:
        proc.kill()
    text = output(root)
    assert "step 1 (developer) failed: exited with status 3" in text
    steps = root / ".poli" / "steps" / RUN
    assert (steps / "step-1.exit").read_text() == "0\n"
    assert (steps / "step-2.exit").read_text() == "0\n"
    assert count(root, 1, "crash") == 1 and count(root, 1, "reply") == 1
    assert count(root, 2, "reply") == 1
    # Each step appended its notes: the handoff builds up, step by step.
    handoff = (root / ".handoff.md").read_text()
    assert handoff.index("Notes from step 1 (attempt 2, headless)") < handoff.index(
        "Notes from step 2 (attempt 1, headless)"
    )
    # The finished run closed its session (no --keep).
    assert f"session poli-proj-{RUN} closed" in text
    assert f"poli-proj-{RUN}" not in server.cmd("list-sessions", "-F", "#{session_name}").stdout
