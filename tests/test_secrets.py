"""Secrets: delivered to the agent they were meant for, never on politerm's disk or output.

Real-format sample secrets go through a task on the Planner⇄Executer loop of fake agents,
routed by a separate ``poli route`` process (so the router never saw the task's text: the
originals must come back from the session's tmux server). Ground truth for delivery is what
the fake agents logged; everything politerm wrote (the store, its WAL, the audit log, the
project's files, the tmux config) and everything every command printed is searched.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import typing as t

from politerm.testing.retry import retry_until
from tests.loophelpers import (
    EXECUTER_OK,
    FINAL,
    IDS,
    PLANNER_HEAD,
    RESULT,
    block,
    open_loop,
    rule,
    write_project,
)

if t.TYPE_CHECKING:
    import libtmux

GITHUB = "ghp_" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
ANTHROPIC = "sk-ant-api03-" + "xY9wV8uT7sR6qP5oN4mL3kJ2iH1gF0eD9cB8aZ7"
AWS_ID = "AKIA" + "QWERTYUIOPASDFGH"
AWS_SECRET = "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7secretkeymaterialQQ\n"
    "aGVsbG8gd29ybGQgc2VjcmV0\n-----END RSA PRIVATE KEY-----"
)
PASSWORD = "password=Tr0ub4dor-and-3"
SECRETS: tuple[str, ...] = (
    GITHUB,
    ANTHROPIC,
    AWS_ID,
    AWS_SECRET.split("=", 1)[1],
    "MIIEowIBAAKCAQEA7secret",
    "Tr0ub4dor-and-3",
)

# The planner copies the GitHub token from its task into the plan it sends the executer.
PLAN_WITH_TOKEN = block("EXECUTER", "plan", "1. Push with token {token}.\n2. Report back.")
PLANNER = (
    PLANNER_HEAD
    + rule(r"\A\s*EXECUTER replied:", FINAL)
    + rule(r"\A(?=TASK_ID=)(?=.*?(?P<token>ghp_[A-Za-z0-9]{36}))", PLAN_WITH_TOKEN)
)
assert IDS and RESULT  # the scenario's rules come from the shared helpers


def _poli(cwd: pathlib.Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def _leaks(root: pathlib.Path, skip: t.Collection[pathlib.Path]) -> list[str]:
    found: list[str] = []
    for path in root.rglob("*"):
        if not path.is_file() or any(path == s or s in path.parents for s in skip):
            continue
        data = path.read_bytes()
        found += [f"{path}: {s[:12]}…" for s in SECRETS if s.encode() in data]
    return found


def test_a_task_with_secrets_is_delivered_whole_and_stored_redacted(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    write_project(root, server.socket_name, planner=PLANNER, executer=EXECUTER_OK)
    outputs: list[str] = []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        out = _poli(root, *args)
        outputs.append(out.stdout + out.stderr)
        return out

    up = run("up")
    assert up.returncode == 0, up.stderr
    router = subprocess.Popen(
        [sys.executable, "-m", "politerm", "route"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        request = (
            f"Deploy it. Use {GITHUB} for git, {ANTHROPIC} for the model, "
            f"{AWS_ID} with {AWS_SECRET}, log in with {PASSWORD}, and this key:\n{PEM}"
        )
        task = run("task", request, "--id", "T-sec", "--timeout", "60")
        assert task.returncode == 0, task.stdout + task.stderr
        run("status")
        run("status", "--json")
        run("answer", "T-sec", f"also {PASSWORD}")
    finally:
        router.terminate()
        outputs.append(router.communicate(timeout=30)[0])
    loop = open_loop(root)
    try:
        # Ground truth: the agents got the originals.
        planner_prompt = "\n".join(loop.prompts("PLANNER"))
        for secret in (GITHUB, ANTHROPIC, AWS_ID, AWS_SECRET, PASSWORD, PEM):
            assert secret in planner_prompt, secret[:12]
        retry_until(
            lambda: any(GITHUB in p for p in loop.prompts("EXECUTER")),
            10,
            what="the executer's plan with the token in it",
        )
        # politerm kept none of them, and showed none.
        events = " ".join(e.detail for e in loop.store.list_events(limit=500))
        assert "[REDACTED:" in loop.store.get_task("T-sec").request  # type: ignore[union-attr]
        assert not [s for s in SECRETS if s in events], events[-3000:]
    finally:
        loop.store.close()
    assert _poli(root, "down").returncode == 0
    for text in outputs:
        assert not [s for s in SECRETS if s in text], text[-3000:]
    agent_files = [
        root / "planner",
        root / "executer",
        root / "planner.jsonl",
        root / "executer.jsonl",
    ]
    assert _leaks(root, agent_files) == []
    assert _leaks(pathlib.Path(os.environ["HOME"]), []) == []


def test_a_pipeline_task_with_secrets_reaches_the_step_and_no_file(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    from politerm.testing.fakeagent import read_log

    assert server.socket_name is not None
    root = tmp_path / "proj"
    (root / ".poli" / "pipelines").mkdir(parents=True)
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\n\n[store]\npath = "runs.sqlite3"\n\n'
        "[timeouts]\nready = 20\n"
    )
    (root / ".poli" / "pipelines" / "p.pipeline").write_text(
        "name: p\ndescription: secrets\ntimeout_min: 1\n\n"
        "1 | developer | - | auto | - | - | Do the task\n"
    )
    request = f"Deploy with {GITHUB} and {PASSWORD}, key:\n{PEM}"
    run = _poli(
        root, "run", "p", "--project", str(root), "--task", request, "--cli", "fake",
        "--run-id", "R1", timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert not [s for s in SECRETS if s in run.stdout + run.stderr]
    # Ground truth: the step's fake agent logged the originals it was given.
    logs = sorted((root / ".poli" / "steps" / "R1").glob("step-1.a*.jsonl"))
    got = "\n".join(e.get("text", "") for p in logs for e in read_log(p) if e["event"] == "prompt")
    for secret in (GITHUB, PASSWORD, PEM):
        assert secret in got, secret[:12]
    status = _poli(root, "status", "--project", str(root), "--json")
    assert not [s for s in SECRETS if s in status.stdout + status.stderr]
    assert _leaks(root, logs) == []
    assert _leaks(pathlib.Path(os.environ["HOME"]), []) == []


def test_handoff_files_are_private_and_redacted(tmp_path: pathlib.Path) -> None:
    from politerm.pipeline.handoff import merge_parallel, step_file, write_initial

    path = write_initial(tmp_path, f"use {GITHUB}", "p", "R1")
    (tmp_path / step_file(2)).write_text(f"step two saw {ANTHROPIC}\n")
    assert merge_parallel(tmp_path, [(2, "dev", 1)], "R1") == [2]
    text = path.read_text()
    assert "[REDACTED:github-token" in text and "[REDACTED:anthropic-key" in text
    assert not [s for s in SECRETS if s in text]
    assert path.stat().st_mode & 0o777 == 0o600
