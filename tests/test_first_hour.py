"""A newcomer's first hour: ``-h`` everywhere, empty states that say what next, piped output.

Every command runs as the real ``poli`` in a subprocess on a clean HOME, its output piped
(not a terminal) and COLUMNS unset, as ``poli work list | grep`` sees it.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import typing as t

import click
import pytest
from click.testing import CliRunner

from politerm.cli import cli

Path = tuple[str, ...]  # a command's words after `poli`


def _paths(group: click.Group, ctx: click.Context, prefix: Path) -> list[Path]:
    out: list[Path] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            out += _paths(command, click.Context(command, parent=ctx), (*prefix, name))
    return out


def test_dash_h_is_help_on_every_command_and_subcommand() -> None:
    root = click.Context(cli)
    paths = _paths(cli, root, ())
    assert ("work", "list") in paths and ("manager", "project", "list") in paths  # the walk
    runner = CliRunner()
    for path in [(), *paths]:
        result = runner.invoke(cli, [*path, "-h"], prog_name="poli")
        assert result.exit_code == 0, f"poli {' '.join(path)} -h: {result.output}"
        assert result.output.startswith(f"Usage: poli {' '.join(path)}".rstrip()), result.output
        assert "-h, --help" in result.output, result.output


def _poli(project: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "POLI_DEBUG")}
    env["TMUX_TMPDIR"] = str(project.parent / "sockets")  # no tmux server there: nothing up
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "sockets").mkdir(mode=0o700)
    root = tmp_path / "proj"
    root.mkdir()
    return root


class Empty(t.NamedTuple):
    test_id: str
    args: tuple[str, ...]
    says: str  # what is empty
    code: int = 0


EMPTY = [
    Empty("status", ("status",), "Nothing here yet: no agents are up and no task was given"),
    Empty("status-all", ("status", "--all"), "no politerm sessions on socket 'poli'"),
    Empty("work-list", ("work", "list"), "no work items; add one with"),
    Empty("log", ("log",), "no session records;"),
    Empty("export", ("export",), "no session records to export;"),
    Empty("panes", ("panes",), "no panes on socket 'poli';"),
    Empty("msg-list", ("msg", "list"), "no messages;"),
    Empty("inbox", ("inbox",), "no messages for user;"),
    Empty("bridge-list", ("bridge", "list"), "queue is empty;"),
    Empty("manager-status", ("manager", "status"), "no manager projects;"),
    Empty("manager-projects", ("manager", "project", "list"), "no manager projects;"),
    Empty("attach", ("attach",), "no session 'poli-proj-", code=1),
    Empty("gate", ("gate", "y"), "no pipeline run in", code=1),
    Empty("abort", ("abort",), "no active task to abort", code=1),
]


@pytest.mark.parametrize("case", EMPTY, ids=[c.test_id for c in EMPTY])
def test_an_empty_state_says_what_is_empty_and_the_next_command(
    project: pathlib.Path, case: Empty
) -> None:
    proc = _poli(project, *case.args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == case.code, out
    assert "Traceback" not in out, out
    assert case.says in out, out
    if case.test_id not in ("gate", "abort", "status-all"):  # these say what to run elsewhere
        assert re.search(r"`poli [a-z][^`]*`", out), f"no next command in {out!r}"


def test_piped_output_is_full_lines_and_never_splits_an_id(project: pathlib.Path) -> None:
    title = "Add a --verbose flag " + " ".join(f"word{i}" for i in range(30))  # > 200 chars
    added = _poli(project, "work", "add", "EPIC-WITH-A-LONG-NAME", title, "-p", "1")
    assert added.returncode == 0, added.stderr
    item = added.stdout.strip()
    listed = _poli(project, "work", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if item in line]
    assert len(rows) == 1 and title in rows[0], listed.stdout  # one line: id and whole title

    doctor = _poli(project, "doctor")
    assert doctor.stdout.startswith("# poli doctor\ncheck\tstatus\tdetail\tfix hint\n"), doctor
    for line in doctor.stdout.splitlines()[2:]:
        assert line.count("\t") == 3, line  # a row per line, tab-separated


def test_go_on_the_fake_agent_runs_it_on_polis_own_interpreter(project: pathlib.Path) -> None:
    """Installed with pipx, the ``python`` on PATH cannot import politerm: poli's own runs it.

    (tests/test_readme.py runs ``poli go E1 --agent fake --yes`` to its report and summary.)
    """
    assert _poli(project, "work", "add", "E1", "Add a --verbose flag").stdout.strip() == "E1-1"
    dry = _poli(project, "go", "E1", "--agent", "fake", "--dry-run")
    argv = f"{sys.executable} -m politerm.testing.fakeagent --mode claude --scenario epic-items"
    assert dry.stdout.startswith(f"agent fake: {argv}\n"), dry.stdout
    agents = _poli(project, "agents")
    assert re.search(rf"^fake\t{re.escape(sys.executable)}\t", agents.stdout, re.MULTILINE), (
        agents.stdout
    )


def test_run_on_a_cli_that_is_not_installed_is_refused_before_anything_starts(
    project: pathlib.Path,
) -> None:
    agents = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    agents.mkdir(parents=True)
    (agents / "nowhere.toml").write_text('command = ["no-such-agent-cli-xyz"]\n')
    run = _poli(project, "run", "feature", "--task", "Add a flag", "--cli", "nowhere")
    assert run.returncode == 1, run.stdout + run.stderr
    refused = (
        "poli: step 1 (product-manager) runs nowhere: cannot start 'no-such-agent-cli-xyz': not "
        "on PATH; install it or set the nowhere profile's command; or run the pipeline on "
        "another CLI with --cli NAME (--cli fake: the bundled fake agent)"
    )
    assert run.stderr.splitlines() == [refused]
    assert not (project / ".poli").exists() and not (project / ".handoff.md").exists()
