"""Secrets: delivered to the agent they were meant for, never on politerm's disk or output.

Real-format sample secrets go through a task on the Planner⇄Executer loop of fake agents,
routed by a separate ``poli route`` process (so the router never saw the task's text: the
originals must come back from the session's tmux server). Ground truth for delivery is what
the fake agents logged; everything politerm wrote (the store, its WAL, the audit log, the
project's files, the tmux config) and everything every command printed is searched.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import typing as t

import politerm
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
CUSTOM = "ACME-TOKEN-" + "0f1e2d3c4b5a6978"  # caught by the project's own [redact] pattern
SECRETS: tuple[str, ...] = (
    CUSTOM,
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
SCENARIOS = pathlib.Path(politerm.__file__).parent / "testing" / "fakeagent" / "scenarios"


def _poli(
    cwd: pathlib.Path, *args: str, timeout: float = 120, stdin: str | None = None,
    env: t.Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
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


def _shown(text: str) -> list[str]:
    return [s[:12] + "…" for s in SECRETS if s in text]


def _fake(root: pathlib.Path, name: str, mode: str, scenario: str) -> list[str]:
    (root / f"{name}.toml").write_text(scenario)
    return [
        sys.executable, "-m", "politerm.testing.fakeagent", "--mode", mode,
        "--scenario", str(root / f"{name}.toml"), "--log", str(root / f"{name}.jsonl"),
    ]  # fmt: skip


def _logged_prompts(path: pathlib.Path) -> str:
    from politerm.testing.fakeagent import read_log

    return "\n".join(e.get("text", "") for e in read_log(path) if e["event"] == "prompt")


# The manager's brain tells the dev agent to use the token; the dev agent reports the line.
BRAIN_RULES = (
    (r"## Latest dev report\n\(none yet\)", f"Push with {GITHUB} and {PASSWORD} now"),
    (r"## Latest dev report\nstatus: success", "TASK_COMPLETE pushed"),
)
BRIDGE_DONE = (
    "[[rules]]\nmatch = '(?s)BRIDGE TASK (?P<id>b1) \\(nonce (?P<nonce>[0-9a-f]+)\\)'\n"
    'reply = \'\'\'\n[[POLI:MSG {"to":"BRIDGE","type":"done","id":"{id}",'
    '"nonce":"{nonce}"}]]\nappended\n[[/POLI:MSG]]\n\'\'\'\n'
    '[rules.write_file]\npath = "f.txt"\ncontent = "a\\nc\\n"\n'
)


def _extra_config(root: pathlib.Path, llm_url: str) -> str:
    epic = _fake(root, "epic", "plain", (SCENARIOS / "epic-items.toml").read_text())
    dev = _fake(root, "dev", "claude", (SCENARIOS / "manager-dev.toml").read_text())
    bridge = _fake(root, "bridger", "claude", 'mode = "claude"\nthink_time = 0.1\n' + BRIDGE_DONE)
    return (
        '[epic]\nagent = "fake-plain"\ngrace = 10\nsession_timeout = 60\n'
        f"[epic.commands]\nfake-plain = {json.dumps(epic)}\n\n"
        '[manager]\nchannel = "pane"\ndev_agent = "fake-claude"\nstep_timeout = 60\n'
        f"dev_command = {json.dumps(dev)}\n"
        f'[manager.brain]\nprovider = "gemini"\nbase_url = "{llm_url}"\nmodel = "m"\n'
        "backoff = 0.01\nmax_retries = 2\ncall_timeout = 20.0\n\n"
        f'[agents.BRIDGER]\ncommand = {json.dumps(bridge)}\nprofile = "fake-claude"\n'
        "primer = false\n\n"
        "[redact]\npatterns = ['ACME-TOKEN-[0-9a-f]+']\n"
    )


def test_sample_secrets_through_every_workflow_reach_the_agents_and_no_disk_or_output(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    """A task, a pipeline, an epic, a manager turn and a bridge task, in one project.

    Every agent got the originals meant for it (its own log says so); no file politerm
    wrote holds one (the store and its WAL, the audit log, handoffs, step prompts, exports,
    archives, tmux config) and no command printed one, plain or ``--json``. Every file
    politerm wrote is 0600 and every folder it made 0700.
    """
    from politerm.testing.mockllm import MockLLM, Rule

    assert server.socket_name is not None
    root = tmp_path / "proj"
    inputs = tmp_path / "inputs"  # the test's own files: the people's copies of the secrets
    inputs.mkdir()
    root.mkdir()
    outputs: list[str] = []
    rules = [Rule(match, reply) for match, reply in BRAIN_RULES]
    with MockLLM(rules, sides=False) as llm:
        write_project(
            root, server.socket_name, planner=PLANNER, executer=EXECUTER_OK,
            extra=_extra_config(root, llm.url),
        )  # fmt: skip
        (root / ".poli" / "pipelines").mkdir(parents=True)
        (root / ".poli" / "pipelines" / "p.pipeline").write_text(
            "name: p\ndescription: secrets\ntimeout_min: 1\n\n"
            "1 | developer | - | auto | - | - | Do the task\n"
        )
        (root / "f.txt").write_text("a\n")
        env = {"GEMINI_API_KEY": llm.token}

        def run(*args: str, stdin: str | None = None, ok: bool = True) -> str:
            out = _poli(root, *args, stdin=stdin, env=env)
            outputs.append(out.stdout + out.stderr)
            if ok:
                assert out.returncode == 0, f"poli {' '.join(args)}: {out.stdout}{out.stderr}"
            return out.stdout

        # 1. A task on the Planner⇄Executer loop, routed by another process.
        run("up")
        router = subprocess.Popen(
            [sys.executable, "-m", "politerm", "route"],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            request = (
                f"Deploy it. Use {GITHUB} for git, {ANTHROPIC} for the model, "
                f"{AWS_ID} with {AWS_SECRET}, log in with {PASSWORD}, call {CUSTOM}, "
                f"and this key:\n{PEM}"
            )
            run("task", request, "--id", "T-sec", "--timeout", "60")
            run("answer", "T-sec", f"also {PASSWORD}", ok=False)
        finally:
            router.terminate()
            outputs.append(router.communicate(timeout=30)[0])
        loop = open_loop(root)
        try:
            planner_prompt = "\n".join(loop.prompts("PLANNER"))
            for secret in (GITHUB, ANTHROPIC, AWS_ID, AWS_SECRET, PASSWORD, CUSTOM, PEM):
                assert secret in planner_prompt, secret[:12]
            retry_until(
                lambda: any(GITHUB in p for p in loop.prompts("EXECUTER")),
                10,
                what="the executer's plan with the token in it",
            )
            assert "[REDACTED:" in loop.store.get_task("T-sec").request  # type: ignore[union-attr]
        finally:
            loop.store.close()
        # 2. An epic: a work item whose title and body file carry secrets, added while the
        # session's tmux server runs (it holds the originals between `work add` and `go`).
        (inputs / "body.txt").write_text(
            f"Use {ANTHROPIC}, {CUSTOM} and {AWS_ID} with {AWS_SECRET}\n{PEM}\n"
        )
        run("work", "add", "E", f"Rotate {GITHUB}", "--id", "E-1",
            "--body-file", str(inputs / "body.txt"))  # fmt: skip
        assert "warning" not in outputs[-1], outputs[-1]  # the server holds the originals
        run("go", "E", "--yes", "--no-interactive", "--no-summary")
        epic_prompt = _logged_prompts(root / "epic.jsonl")
        for secret in (GITHUB, ANTHROPIC, AWS_ID, AWS_SECRET, CUSTOM, PEM):
            assert secret in epic_prompt, secret[:12]

        run("down")

        # 3. A pipeline run on the fake agent.
        step_task = f"Deploy with {GITHUB}, {CUSTOM} and {PASSWORD}, key:\n{PEM}"
        run("run", "p", "--task", step_task, "--cli", "fake", "--run-id", "R1")
        step_logs = sorted((root / ".poli" / "steps" / "R1").glob("step-1.a*.jsonl"))
        got = "\n".join(_logged_prompts(p) for p in step_logs)
        for secret in (GITHUB, PASSWORD, CUSTOM, PEM):
            assert secret in got, secret[:12]

        # 4. A manager turn: the goal and the brain's instruction carry secrets.
        (root / "web").mkdir()
        run("manager", "project", "add", "web", str(root / "web"), "--channel", "pane")
        run("manager", "goal", "--project", "web", f"Ship it with {ANTHROPIC}, {CUSTOM} and {PEM}",
            "--json")  # fmt: skip
        dev_prompt = _logged_prompts(root / "dev.jsonl")
        for secret in (GITHUB, PASSWORD):
            assert secret in dev_prompt, secret[:12]

        # 5. A bridge task handed to an agent.
        task = {
            "task_id": "b1",
            "instruction_details": {
                "description": f"Deploy with {GITHUB}, {AWS_ID}, {CUSTOM} and {PASSWORD}",
                "file_path": "f.txt", "action": "append_content", "content": "c\n",
            },
        }  # fmt: skip
        run("bridge", "submit", "-", stdin=json.dumps(task))
        run("bridge", "start", "--once", "--executor", "agent:BRIDGER")
        bridge_prompt = _logged_prompts(root / "bridger.jsonl")
        for secret in (GITHUB, AWS_ID, CUSTOM, PASSWORD):
            assert secret in bridge_prompt, secret[:12]

        # Every command that shows what happened, plain and --json.
        for args in (
            ("status",), ("status", "--json"), ("log",), ("log", "--json"),
            ("export", "--jsonl"), ("work", "list"), ("work", "show", "E-1"),
            ("manager", "status"), ("manager", "status", "--json"),
            ("bridge", "list"), ("bridge", "list", "--json"), ("bridge", "show", "b1"),
        ):  # fmt: skip
            run(*args)
        run("export", "--jsonl", "--output", "export.jsonl")
        run("down", ok=False)
    for text in outputs:
        assert _shown(text) == [], text[-3000:]
    # The agents' own files and the test's own inputs.
    theirs = [root / n for n in ("planner", "executer", "web", "f.txt", ".poli/pipelines")]
    theirs += [*root.glob("*.jsonl"), *root.glob("*.toml"), *step_logs]
    # The queue file is the requester's data, verbatim (see docs/bridge.md); still 0600.
    queue = root / ".poli" / "bridge" / "task_queue.json"
    assert _leaks(root, [*theirs, queue]) == []
    assert _leaks(pathlib.Path(os.environ["HOME"]), []) == []
    assert (root / "export.jsonl").exists() and queue.exists()
    _assert_private(root, theirs)


def _assert_private(root: pathlib.Path, theirs: t.Collection[pathlib.Path]) -> None:
    """Every file politerm wrote is 0600, every folder it made 0700 (parents included)."""
    state = pathlib.Path(os.environ["XDG_STATE_HOME"])
    made = [pathlib.Path(os.environ["HOME"]) / ".local", state, *state.rglob("*")]
    made += [p for p in root.rglob("*") if p != root / ".poli"]  # .poli: the test made it
    bad = []
    for path in made:
        if any(path == s or s in path.parents for s in theirs) or path.is_socket():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            bad.append(f"{path}: {oct(mode)}")
    assert bad == []


def test_handoff_files_are_private_and_redacted(tmp_path: pathlib.Path) -> None:
    from politerm.pipeline.handoff import merge_parallel, step_file, write_initial

    path = write_initial(tmp_path, f"use {GITHUB}", "p", "R1")
    (tmp_path / step_file(2)).write_text(f"step two saw {ANTHROPIC}\n")
    assert merge_parallel(tmp_path, [(2, "dev", 1)], "R1") == [2]
    text = path.read_text()
    assert "[REDACTED:github-token" in text and "[REDACTED:anthropic-key" in text
    assert not [s for s in SECRETS if s in text]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_work_item_with_a_secret_and_no_server_to_hold_it_says_so(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "poli.toml").write_text('[tmux]\nsocket = "poli-test-none-running"\n')
    added = _poli(tmp_path, "work", "add", "E", f"Rotate {GITHUB}", "--id", "E-1")
    assert added.returncode == 0, added.stderr
    assert added.stdout == "E-1\n"
    assert added.stderr.startswith("poli: warning: E-1 holds secrets, stored redacted;")
    assert len(added.stderr.splitlines()) == 1
    shown = _poli(tmp_path, "work", "show", "E-1")
    assert "[REDACTED:github-token#" in shown.stdout and GITHUB not in shown.stdout
