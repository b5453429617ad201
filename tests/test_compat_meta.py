"""Coming from META: its repository layout (``workflows/pipelines``, modules with ``N``/``N+1``
step numbers, ``agents/``), the ``interactive`` CLI, ``.meta/`` handoff files and ``meta run``'s
flags. The fixtures under tests/fixtures/meta are small files written in META's formats."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import typing as t

import pytest

from politerm.pipeline.agents import AgentSearch, meta_root
from politerm.pipeline.parser import load_pipeline, parse_pipeline

if t.TYPE_CHECKING:
    import libtmux

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "meta" / "META"


def poli(cwd: pathlib.Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", "HOME": str(cwd)},
        check=False,
    )


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    """A project with a META checkout in it (``META/``), as META's users keep one."""
    root = tmp_path / "app"
    root.mkdir()
    shutil.copytree(FIXTURE, root / "META")
    (root / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    return root


def test_modules_with_relative_numbers_are_spliced_in_order(project: pathlib.Path) -> None:
    pipe = load_pipeline(project / "META/workflows/pipelines/feature.pipeline", project)
    assert [(s.num, s.agent, s.group, s.source.rsplit("/", 1)[1]) for s in pipe.steps] == [
        (1, "base", None, "feature.pipeline"),
        (2, "architect", None, "feature.pipeline"),
        (3, "tester", "build", "impl-parallel.steps"),
        (4, "base", "build", "impl-parallel.steps"),
        (5, "base", None, "impl-parallel.steps"),
        (6, "reviewer", None, "review.steps"),
        (7, "base", None, "review.steps"),
    ]
    assert [s.gate.value for s in pipe.steps] == ["auto", "gate", "auto", "auto", "auto", "gate",
                                                  "auto"]  # fmt: skip


def test_relative_numbers_only_in_modules() -> None:
    _, problems = parse_pipeline("name: x\ntimeout_min: 5\nN | base | - | auto | - | - | go\n")
    want = "<string>:3: step number must be a whole number >= 1, got 'N' (N, N+1 … only in"
    assert [str(p) for p in problems] == [f"{want} an @include'd module)"]


def test_validate_show_and_dry_run_from_a_meta_checkout(project: pathlib.Path) -> None:
    feature = "META/workflows/pipelines/feature.pipeline"
    out = poli(
        project, "pipeline", "validate", feature, "META/workflows/pipelines/kickoff.pipeline"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    shown = json.loads(poli(project, "pipeline", "show", feature, "--json").stdout)
    assert [s["num"] for s in shown["steps"]] == [1, 2, 3, 4, 5, 6, 7]
    plan = poli(project, "run", feature, "--task", "Add search", "--dry-run", "--run-id", "D1")
    assert plan.returncode == 0, plan.stderr
    text = plan.stdout
    # META's handoff files, named the same way by the prompt and by the merge.
    assert f"handoff: writes {project / '.meta' / 'handoff.md'} with the task" in text
    assert "Read .meta/handoff.md: it holds the task" in text
    assert "HANDOFF_FILE=.meta/handoff-step-3.md" in text
    assert "-- sync: merge .meta/handoff-step-*.md files into .meta/handoff.md" in text
    # META retries a failed step 3 times by default; the roles come from META/agents.
    assert "on failure: retry:3" in text
    assert "You are the reviewer agent of this project." in text
    assert "-- step 1: base on claude, timeout 5 min" in text


def test_the_handoff_dir_setting_names_the_same_files_in_prompts_and_merge(
    project: pathlib.Path,
) -> None:
    (project / "poli.toml").write_text('[pipeline]\nhandoff_dir = "notes"\n')
    feature = "META/workflows/pipelines/feature.pipeline"
    text = poli(project, "run", feature, "--task", "t", "--dry-run").stdout
    assert f"handoff: writes {project / 'notes' / 'handoff.md'} with the task" in text
    assert "HANDOFF_FILE=notes/handoff.md" in text
    assert "HANDOFF_FILE=notes/handoff-step-3.md" in text
    assert "HANDOFF_FILE=notes/handoff-step-4.md" in text
    assert "-- sync: merge notes/handoff-step-*.md files into notes/handoff.md" in text
    assert "HANDOFF_FILE=.meta/" not in text


def test_meta_run_flags_in_a_dry_run(project: pathlib.Path) -> None:
    feature = "META/workflows/pipelines/feature.pipeline"

    def plan(*flags: str) -> subprocess.CompletedProcess[str]:
        return poli(project, "run", feature, "--task", "t", "--dry-run", *flags)

    text = plan("--cli", "codex", "--auto-approve", "--max-retries", "1").stdout
    assert "on failure: retry:1" in text
    assert "gates: approved automatically" in text
    assert "--cli: codex (every step)" in text
    assert text.count(" on codex, timeout") == 7
    assert "on failure: ask" in plan("--no-auto-retry").stdout
    both = plan("--no-auto-retry", "--max-retries", "2")
    assert both.returncode == 1
    assert both.stderr.strip() == (
        "poli: give only one of --on-fail, --max-retries and --no-auto-retry"
    )
    commit = plan("--no-auto-commit", "--worktrees")
    assert commit.returncode == 1
    assert "--no-auto-commit cannot go with --worktrees" in commit.stderr
    assert plan("--no-auto-commit").returncode == 0
    headless = plan("--headless").stdout
    assert "--allowedTools 'Bash Edit Read Write Glob Grep' -p" in headless
    notask = poli(project, "run", feature, "--dry-run")
    assert notask.stderr.strip() == (
        "poli: --task is required (or --continue to go on with the latest run)"
    )


def test_interactive_steps_stay_in_their_tui(project: pathlib.Path) -> None:
    kickoff = "META/workflows/pipelines/kickoff.pipeline"
    text = poli(project, "run", kickoff, "--task", "t", "--dry-run", "--headless").stdout
    step1 = text.split("-- step 1:", 1)[1].split("-- step 2:", 1)[0]
    assert step1.startswith(" base on claude (interactive: a person marks it done)")
    assert "politerm.pipeline._headless" not in step1
    assert "Then stop: your exit status" not in step1
    assert "politerm.pipeline._headless" in text.split("-- step 2:", 1)[1]


def test_cli_interactive_steps_keep_their_cli(project: pathlib.Path) -> None:
    # META's claude-interactive / codex-interactive: a person's step on that CLI, even under
    # --cli (as META's select_cli keeps them).
    pair = project / "META/workflows/pipelines/pair.pipeline"
    pair.write_text(
        "name: pair\ntimeout_min: 5\n"
        "1 | base | codex-interactive | auto | - | - | Pair on the design.\n"
        "2 | base | - | auto | - | - | Write it down.\n"
    )
    text = poli(project, "run", str(pair), "--task", "t", "--dry-run", "--cli", "claude").stdout
    assert "-- step 1: base on codex (interactive: a person marks it done)" in text
    assert "-- step 2: base on claude, timeout" in text
    pair.write_text(pair.read_text().replace("codex-interactive", "codx-interactive"))
    bad = poli(project, "pipeline", "validate", str(pair))
    assert bad.returncode == 1
    assert "unknown CLI 'codx-interactive' (did you mean 'codex'?)" in bad.stdout


def test_agents_where_meta_keeps_them_and_where_it_looked(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "p"
    (root / ".poli" / "pipelines").mkdir(parents=True)
    (root / ".poli" / "pipelines" / "x.pipeline").write_text(
        "name: x\ntimeout_min: 5\n1 | scout | - | auto | - | - | look around\n"
    )
    out = poli(root, "pipeline", "validate", ".poli/pipelines/x.pipeline")
    assert out.returncode == 1
    line = out.stdout.strip()
    assert "missing agent definition scout.md for agent 'scout' (looked in " in line
    for where in (root / ".poli" / "agents", root / "META" / "agents"):
        assert str(where) in line
    mine = tmp_path / "my-agents"
    mine.mkdir()
    (mine / "scout.md").write_text("You scout.")
    ok = poli(root, "pipeline", "validate", "--agents", str(mine), ".poli/pipelines/x.pipeline")
    assert ok.returncode == 0, ok.stdout
    # The search path in poli.toml, relative to the project.
    (root / "poli.toml").write_text(f'[pipeline]\nagents_path = ["{mine}"]\n')
    assert poli(root, "pipeline", "validate", ".poli/pipelines/x.pipeline").returncode == 0
    # META/agents in the project.
    (root / "poli.toml").unlink()
    (root / "META" / "agents").mkdir(parents=True)
    shutil.copy(mine / "scout.md", root / "META" / "agents" / "scout.md")
    assert poli(root, "pipeline", "validate", ".poli/pipelines/x.pipeline").returncode == 0


def test_a_meta_checkout_beside_the_project(tmp_path: pathlib.Path) -> None:
    # META kept apart from the project (~/src/META): agents/ beside that repository's root.
    meta = tmp_path / "src" / "META"
    shutil.copytree(FIXTURE, meta)
    app = tmp_path / "app"
    app.mkdir()
    feature = str(meta / "workflows" / "pipelines" / "feature.pipeline")
    out = poli(app, "pipeline", "validate", feature)
    assert out.returncode == 0, out.stdout + out.stderr
    shown = json.loads(poli(app, "pipeline", "show", feature, "--json").stdout)
    assert [s["agent"] for s in shown["steps"]][-2:] == ["reviewer", "base"]
    plan = poli(app, "run", feature, "--task", "Add search", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "You are the reviewer agent of this project." in plan.stdout
    assert f"handoff: writes {app / '.meta' / 'handoff.md'} with the task" in plan.stdout
    assert "on failure: retry:3" in plan.stdout
    (meta / "agents" / "base.md").unlink()  # not a built-in agent
    missing = poli(app, "pipeline", "validate", feature)
    assert missing.returncode == 1
    assert "missing agent definition base.md" in missing.stdout
    assert str(meta / "agents") in missing.stdout


def test_agent_search_order(tmp_path: pathlib.Path) -> None:
    repo = tmp_path / "META"
    pipeline = repo / "workflows" / "pipelines" / "f.pipeline"
    assert meta_root(pipeline) == repo
    search = AgentSearch.for_run(
        tmp_path / "proj", pipeline=pipeline, extra=[tmp_path / "x"], configured=["cfg"]
    )
    assert [source for source, _ in search.dirs] == [
        "--agents", "project", "agents_path", "META", "pipeline repository", "user", "builtin",
    ]  # fmt: skip


def test_doctor_project_validates_a_meta_checkout(project: pathlib.Path) -> None:
    out = poli(project.parent, "doctor", "--json", "--project", str(project))
    rows = {r["check"]: r for r in json.loads(out.stdout)}
    assert rows["pipelines"]["status"] == "OK", rows["pipelines"]
    (project / "META/workflows/pipelines/broken.pipeline").write_text(
        "name: broken\ntimeout_min: 5\n1 | ghost | - | auto | - | - | boo\n"
    )
    out = poli(project.parent, "doctor", "--json", "--project", str(project))
    rows = {r["check"]: r for r in json.loads(out.stdout)}
    assert rows["pipelines"]["status"] == "FAIL"
    assert "missing agent definition ghost.md" in rows["pipelines"]["detail"]


def test_meta_pipeline_runs_with_interactive_step_and_meta_handoffs(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    from tests.test_pipeline_run import finish, output, wait_question

    assert server.socket_name is not None
    (project / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\n\n[store]\npath = "runs.sqlite3"\n\n'
        "[timeouts]\nready = 20\n"
    )
    (project / "META/workflows/pipelines/small.pipeline").write_text(
        "name: small\ntimeout_min: 2\n"
        "1 | base | interactive | auto | - | - | Ask the person what to build.\n"
        "2 | tester | - | gate | side | - | Write tests.\n"
        "3 | base | - | auto | side | - | Write code.\n"
    )
    argv = [sys.executable, "-m", "politerm", "run", "META/workflows/pipelines/small.pipeline",
            "--project", str(project), "--task", "Add a greeting", "--cli", "fake",
            "--run-id", "R1", "--auto-approve"]  # fmt: skip
    with (project / "run.out").open("wb") as out:
        proc = subprocess.Popen(argv, cwd=project, stdout=out, stderr=subprocess.STDOUT)
    try:
        q = wait_question(project, 1, "interactive")
        assert "work with the agent in window" in q["question"]
        answered = poli(project, "gate", "y", "--project", str(project))
        assert answered.returncode == 0, answered.stderr
        assert finish(proc, project, 90) == 0, output(project)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = output(project)
    assert "step 2: gate approved (--auto-approve)" in text
    assert "into .meta/handoff.md" in text
    handoff = (project / ".meta" / "handoff.md").read_text()
    assert "Notes from step 1" in handoff  # the fake agent rewrote it in step 1
    assert "## Parallel Step 2 (tester)" in handoff
    assert "## Parallel Step 3 (base)" in handoff
    assert (project / ".meta" / "handoff-step-3.md").is_file()
    assert not (project / ".handoff.md").exists()


def test_continue_goes_on_with_the_latest_run_of_that_pipeline(
    server: libtmux.Server, project: pathlib.Path
) -> None:
    import signal

    from politerm.testing.retry import retry_until
    from tests.test_pipeline_run import count

    assert server.socket_name is not None
    (project / "poli.toml").write_text(
        f'[tmux]\nsocket = "{server.socket_name}"\n\n[store]\npath = "runs.sqlite3"\n\n'
        '[timeouts]\nready = 20\n\n[pipeline]\nhandoff_dir = "notes"\n'
    )
    (project / ".poli" / "pipelines").mkdir(parents=True)
    small = project / ".poli" / "pipelines" / "two.pipeline"
    small.write_text(
        "name: two\ntimeout_min: 2\n"
        "1 | base | - | auto | - | - | One FAKE:slow\n"
        "2 | tester | - | auto | - | - | Two\n"
    )
    argv = [sys.executable, "-m", "politerm", "run", "two", "--project", str(project),
            "--task", "Add a greeting", "--cli", "fake", "--run-id", "R1", "--agents",
            str(project / "META" / "agents")]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=project, stdout=subprocess.DEVNULL)
    try:
        retry_until(lambda: count(project, 1, "prompt"), 60, what="step 1 to get its prompt")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    other = poli(project, "run", "META/workflows/pipelines/kickoff.pipeline", "--continue")
    assert other.returncode == 1
    assert other.stderr.startswith("poli: --continue: the latest run (R1) is of ")
    # --agents of the first run is kept: the agents are still found on the way on.
    went_on = poli(project, "run", "two", "--continue", "--project", str(project), timeout=90)
    assert went_on.returncode == 0, went_on.stdout + went_on.stderr
    assert "run R1: done" in went_on.stdout
    assert [count(project, n, "prompt") for n in (1, 2)] == [1, 1]
    # The handoff directory setting: the prompts name notes/handoff.md and the agents wrote it.
    prompt = (project / ".poli" / "steps" / "R1" / "step-2.a1.prompt.md").read_text()
    assert "Read notes/handoff.md: it holds the task" in prompt
    assert "Notes from step 2" in (project / "notes" / "handoff.md").read_text()
    assert not (project / ".handoff.md").exists()


def test_metas_pipelines_are_found_by_name_first(project: pathlib.Path) -> None:
    # A project holding META: its pipelines by bare name, before politerm's built-ins.
    plan = poli(project, "run", "feature", "--task", "Add search", "--dry-run", "--run-id", "N1")
    assert plan.returncode == 0, plan.stderr
    assert "on failure: retry:3" in plan.stdout  # META's feature, not the built-in one
    assert "You are the reviewer agent of this project." in plan.stdout
    kick = poli(project, "run", "kickoff", "--task", "x", "--dry-run", "--run-id", "N2")
    assert kick.returncode == 0, kick.stderr
    rows = json.loads(poli(project, "list", "--json").stdout)
    where = {(r["name"], r["source"]) for r in rows}
    assert {("feature", "META"), ("kickoff", "META"), ("feature", "builtin (shadowed)")} <= where
    builtin = poli(project, "run", "builtin:feature", "--task", "x", "--dry-run", "--run-id", "N3")
    assert builtin.returncode == 0, builtin.stderr
    assert "on failure: ask" in builtin.stdout
    # The same name in two of the project's own folders: say which files it could mean.
    (project / ".poli" / "pipelines").mkdir(parents=True)
    shutil.copy(
        project / "META/workflows/pipelines/kickoff.pipeline",
        project / ".poli/pipelines/kickoff.pipeline",
    )
    both = poli(project, "run", "kickoff", "--task", "x", "--dry-run")
    assert both.returncode != 0
    assert both.stderr.startswith("poli: pipeline 'kickoff' is ambiguous, it could mean META:")
    assert "project:kickoff (" in both.stderr
    assert len(both.stderr.splitlines()) == 1
    mine = poli(project, "run", "project:kickoff", "--task", "x", "--dry-run", "--run-id", "N4")
    assert mine.returncode == 0, mine.stderr
