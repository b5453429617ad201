"""Shell completion as the shell asks for it: commands, pipelines, run ids, tasks, agents."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from politerm.store import RunStore

# The installed `poli` script: the shell completes the program by that name.
POLI = str(pathlib.Path(sys.executable).with_name("poli"))


def _complete(cwd: pathlib.Path, words: str) -> list[str]:
    parts = words.split(" ")
    env = {
        **os.environ,
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(parts) - 1),
        "_POLI_COMPLETE": "bash_complete",
    }
    out = subprocess.run(
        [POLI],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return [line.split(",", 1)[1] for line in out.stdout.splitlines() if "," in line]


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        store.create_task("T-alpha", "first", max_rounds=3)
        store.create_task("T-beta", "second", max_rounds=3)
    poli = tmp_path / ".poli"
    poli.mkdir()
    (poli / "state.20261123-abc").write_text("run_id=20261123-abc\npipeline=feature\n")
    return tmp_path


def test_commands_and_options(project: pathlib.Path) -> None:
    assert "completion" in _complete(project, "poli comp")
    assert "--run-id" in _complete(project, "poli gate y --ru")


def test_task_ids_agents_run_ids_and_pipelines(project: pathlib.Path) -> None:
    assert _complete(project, "poli answer T-") == ["T-alpha", "T-beta"]
    assert _complete(project, "poli abort T-b") == ["T-beta"]
    assert {"PLANNER", "EXECUTER"} <= set(_complete(project, "poli approve "))
    assert _complete(project, "poli gate y --run-id 2026") == ["20261123-abc"]
    assert "feature" in _complete(project, "poli run ")
    assert "bugfix" in _complete(project, "poli pipeline show b")


def test_completing_never_creates_a_store(tmp_path: pathlib.Path) -> None:
    (tmp_path / "poli.toml").write_text('[store]\npath = "runs.sqlite3"\n')
    assert _complete(tmp_path, "poli answer ") == []
    assert not (tmp_path / "runs.sqlite3").exists()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_prints_and_installs(tmp_path: pathlib.Path, shell: str) -> None:
    run = [sys.executable, "-m", "politerm", "completion", shell]
    printed = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert printed.returncode == 0 and "_POLI_COMPLETE" in printed.stdout
    installed = subprocess.run(
        [*run, "--install"], capture_output=True, text=True, timeout=60, check=False
    )
    assert installed.returncode == 0, installed.stderr
    path = pathlib.Path(installed.stdout.split()[1].rstrip(";"))
    assert path.is_relative_to(pathlib.Path(os.environ["HOME"]))
    assert "_POLI_COMPLETE" in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
