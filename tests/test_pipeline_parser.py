"""The .pipeline format: good files, escaped pipes, includes, every error with its line; dry run."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import typing as t

import pytest

from politerm.errors import PipelineInvalid
from politerm.pipeline.agents import BUILTIN_DIR, find_agent, list_pipelines
from politerm.pipeline.dry_run import dry_run
from politerm.pipeline.launch import CLAUDE_ALLOWED_TOOLS
from politerm.pipeline.model import Gate
from politerm.pipeline.parser import load_pipeline, parse_pipeline

HEAD = "name: t\ndescription: a test\ntimeout_min: 10\n"
AGENTS = {"dev", "qa", "pm"}
CLIS = {"claude", "codex", "fake"}


def parse(text: str, path: str = "t.pipeline") -> tuple[t.Any, list[str]]:
    pipe, problems = parse_pipeline(text, path, known_clis=CLIS, agent_exists=lambda a: a in AGENTS)
    return pipe, [f"{p.line}: {p.detail}" for p in problems]


class Good(t.NamedTuple):
    test_id: str
    text: str
    steps: list[tuple[int, str, str | None, str, str | None, float | None, str]]


GOOD = [
    Good(
        "minimal",
        HEAD + "1 | dev | - | auto | - | - | do it\n",
        [(1, "dev", None, "auto", None, None, "do it")],
    ),
    Good(
        "all-columns-comments-blank-lines",
        "# a pipeline\n\n" + HEAD + "\n# NUM | AGENT | ...\n"
        "1 | pm | claude | gate | - | 30 | write the PRD\n\n"
        "   # indented comment\n"
        "2 | dev | codex | auto | dev | 0.5 | build\n"
        "3 | qa  | -     | auto | dev | -   | test\n",
        [
            (1, "pm", "claude", "gate", None, 30.0, "write the PRD"),
            (2, "dev", "codex", "auto", "dev", 0.5, "build"),
            (3, "qa", None, "auto", "dev", None, "test"),
        ],
    ),
    Good(
        "escaped-pipes",
        HEAD + r"1 | dev | - | auto | - | - | run `ls \| wc -l` and a\|b" + "\n",
        [(1, "dev", None, "auto", None, None, "run `ls | wc -l` and a|b")],
    ),
    Good(
        "header-after-steps-and-out-of-order-rows",
        "2 | qa | - | auto | - | - | second\n1 | dev | - | auto | - | - | first\n" + HEAD,
        [
            (1, "dev", None, "auto", None, None, "first"),
            (2, "qa", None, "auto", None, None, "second"),
        ],
    ),
]


@pytest.mark.parametrize("case", GOOD, ids=[c.test_id for c in GOOD])
def test_good_files(case: Good) -> None:
    pipe, problems = parse(case.text)
    assert problems == []
    assert pipe.name == "t" and pipe.timeout_min == 10
    got = [
        (s.num, s.agent, s.cli, s.gate.value, s.group, s.timeout_min, s.prompt) for s in pipe.steps
    ]
    assert got == case.steps


class Bad(t.NamedTuple):
    test_id: str
    text: str
    problems: list[str]


BAD = [
    Bad("unknown-gate", HEAD + "1 | dev | - | maybe | - | - | x\n",
        ["4: unknown gate 'maybe' (expected auto or gate)"]),
    Bad("unknown-cli", HEAD + "1 | dev | cladue | auto | - | - | x\n",
        ["4: unknown CLI 'cladue' (did you mean 'claude'?); known: claude, codex, fake"]),
    Bad("duplicate-number",
        HEAD + "1 | dev | - | auto | - | - | x\n1 | qa | - | auto | - | - | y\n",
        ["5: duplicate step number 1 (also at t.pipeline:4)"]),
    Bad("missing-number", HEAD + "1 | dev | - | auto | - | - | x\n3 | qa | - | auto | - | - | y\n",
        ["5: missing step number 2 (steps go 1, 2, 3, ...)"]),
    Bad("non-numeric-step-number", HEAD + "one | dev | - | auto | - | - | x\n",
        ["4: step number must be a whole number >= 1, got 'one'"]),
    Bad("non-numeric-timeout", HEAD + "1 | dev | - | auto | - | soon | x\n",
        ["4: timeout must be a number of minutes > 0 or -, got 'soon'"]),
    Bad("non-numeric-header-timeout", "name: t\ntimeout_min: 1h\n1 | dev | - | auto | - | - | x\n",
        ["2: timeout_min must be a number of minutes > 0, got '1h'"]),
    Bad("group-not-adjacent", HEAD + "1 | dev | - | auto | g | - | a\n"
        "2 | qa | - | auto | - | - | b\n3 | pm | - | auto | g | - | c\n",
        ["6: parallel group 'g' is not adjacent: its steps must follow each other"]),
    Bad("missing-agent", HEAD + "1 | ghost | - | auto | - | - | x\n",
        ["4: missing agent definition ghost.md for agent 'ghost'"]),
    Bad("empty-prompt", HEAD + "1 | dev | - | auto | - | - |   \n", ["4: empty prompt"]),
    Bad("missing-header", "1 | dev | - | auto | - | - | x\n",
        ["1: missing header: name", "1: missing header: timeout_min"]),
    Bad("unknown-header", HEAD + "owner: me\n1 | dev | - | auto | - | - | x\n",
        ["4: unknown header 'owner' (expected name, description, timeout_min)"]),
    Bad("unescaped-pipe-in-prompt", HEAD + "1 | dev | - | auto | - | - | a | b\n",
        [("4: expected 7 columns (NUM | AGENT | CLI | GATE | PARALLEL_GROUP | TIMEOUT_MIN | "
          r"PROMPT), got 8; write literal pipes in PROMPT as \|")]),
    Bad("garbage-line", HEAD + "run the tests\n1 | dev | - | auto | - | - | x\n",
        ["4: not a step row, a 'key: value' header or an @include line"]),
    Bad("every-problem-at-once", "description: x\n1 | dev | nope | auto | - | - | a\n"
        "1 | ghost | - | later | - | x | \n",
        ["1: missing header: name", "1: missing header: timeout_min",
         "2: unknown CLI 'nope'; known: claude, codex, fake",
         "3: missing agent definition ghost.md for agent 'ghost'",
         "3: unknown gate 'later' (expected auto or gate)",
         "3: timeout must be a number of minutes > 0 or -, got 'x'", "3: empty prompt",
         "3: duplicate step number 1 (also at t.pipeline:2)"]),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=[c.test_id for c in BAD])
def test_every_error_with_its_line(case: Bad) -> None:
    pipe, problems = parse(case.text)
    assert pipe is None
    assert problems == case.problems


def test_includes_splice_steps_numbered_from_the_include_point(tmp_path: pathlib.Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "review.steps").write_text(
        "# review module\n1 | qa | - | gate | - | - | review\n@include docs.steps\n"
    )
    (tmp_path / "shared" / "docs.steps").write_text("1 | pm | - | auto | - | 5 | write docs\n")
    main = tmp_path / "f.pipeline"
    main.write_text(
        HEAD + "1 | dev | - | auto | - | - | build\n@include shared/review.steps\n"
        "4 | dev | - | auto | - | - | release\n"
    )
    pipe, problems = parse(main.read_text(), str(main))
    assert problems == []
    assert [(s.num, s.agent, s.gate, s.prompt) for s in pipe.steps] == [
        (1, "dev", Gate.AUTO, "build"),
        (2, "qa", Gate.GATE, "review"),
        (3, "pm", Gate.AUTO, "write docs"),
        (4, "dev", Gate.AUTO, "release"),
    ]
    assert pipe.step(3).source.endswith("docs.steps") and pipe.step(3).line == 1


def test_include_errors_name_the_included_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.steps").write_text("name: x\n1 | qa | - | nope | - | - | y\n")
    (tmp_path / "loop.steps").write_text("@include loop.steps\n")
    main = tmp_path / "f.pipeline"
    main.write_text(
        HEAD + "@include bad.steps\n@include missing.steps\n@include loop.steps\n"
        "2 | dev | - | auto | - | - | x\n"
    )
    _, problems = parse_pipeline(main.read_text(), main, agent_exists=lambda a: a in AGENTS)
    got = [str(p).replace(str(tmp_path) + "/", "") for p in problems]
    assert got[0].startswith("f.pipeline:5: @include missing.steps: cannot read")
    assert got[1:] == [
        "bad.steps:1: header 'name' in a step module (.steps has rows only)",
        "bad.steps:2: unknown gate 'nope' (expected auto or gate)",
        "loop.steps:1: @include loop.steps: include cycle",
    ]


def test_builtin_pipelines_are_valid_and_listed(tmp_path: pathlib.Path) -> None:
    found = {p.name: p for p in list_pipelines(tmp_path)}
    assert {"feature", "bugfix", "refactor"} <= set(found)
    for name in ("feature", "bugfix", "refactor"):
        pipe = load_pipeline(found[name].path, tmp_path)
        assert pipe.name == name and pipe.steps
        for step in pipe.steps:
            assert find_agent(step.agent, tmp_path) is not None
    feature = load_pipeline(BUILTIN_DIR / "feature.pipeline")
    assert [[s.num for s in st] for st in feature.stages()] == [[1], [2], [3, 4], [5], [6]]


def test_agent_lookup_project_then_user_then_builtin(tmp_path: pathlib.Path) -> None:
    builtin = find_agent("tester", tmp_path)
    assert builtin is not None and builtin.parent == BUILTIN_DIR / "agents"
    user = pathlib.Path(os.environ["XDG_CONFIG_HOME"]) / "politerm" / "agents"
    user.mkdir(parents=True)
    (user / "tester.md").write_text("user tester")
    assert find_agent("tester", tmp_path) == user / "tester.md"
    proj = tmp_path / ".poli" / "agents"
    proj.mkdir(parents=True)
    (proj / "tester.md").write_text("project tester")
    assert find_agent("tester", tmp_path) == proj / "tester.md"


def _poli(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "politerm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_cli_validate_show_and_list(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.pipeline"
    good.write_text(HEAD.replace("name: t", "name: good") + "1 | tester | - | auto | - | - | go\n")
    bad = tmp_path / "bad.pipeline"
    bad.write_text("name: bad\n1 | nobody | warp | auto | - | x | go\n")
    out = _poli(tmp_path, "pipeline", "validate", str(good), str(bad))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"{good}: ok",
        f"{bad}:1: missing header: timeout_min",
        f"{bad}:2: missing agent definition nobody.md for agent 'nobody' (looked in "
        f"{tmp_path / '.poli' / 'agents'}, {tmp_path / 'META' / 'agents'}, "
        + out.stdout.splitlines()[2].split(f"{tmp_path / 'META' / 'agents'}, ", 1)[1],
        f"{bad}:2: " + out.stdout.splitlines()[3].split(":2: ", 1)[1],
        f"{bad}:2: timeout must be a number of minutes > 0 or -, got 'x'",
    ]
    assert "unknown CLI 'warp'" in out.stdout
    assert _poli(tmp_path, "pipeline", "validate", str(good)).returncode == 0
    shown = json.loads(_poli(tmp_path, "pipeline", "show", str(good), "--json").stdout)
    assert shown["name"] == "good" and shown["steps"][0]["agent"] == "tester"
    table = _poli(tmp_path, "pipeline", "show", "feature")
    assert table.returncode == 0 and "product-manager" in table.stdout
    (tmp_path / ".poli" / "pipelines").mkdir(parents=True)
    (tmp_path / ".poli" / "pipelines" / "feature.pipeline").write_text(good.read_text())
    listed = json.loads(_poli(tmp_path, "list", "--json").stdout)
    by_source = {(r["name"], r["source"]) for r in listed}
    assert ("feature", "project") in by_source and ("feature", "builtin (shadowed)") in by_source
    assert ("bugfix", "builtin") in by_source


def test_dry_run_prints_sessions_windows_commands_prompts_and_gates(tmp_path: pathlib.Path) -> None:
    pipe = load_pipeline(BUILTIN_DIR / "feature.pipeline", tmp_path)
    text = dry_run(
        pipe, project=tmp_path, task="add a --verbose flag", cli="fake", run_id="RUN1",
        socket="sock", use_worktrees=True, on_fail="retry:2",
    )  # fmt: skip
    assert f"tmux: socket sock, session poli-{tmp_path.name}-RUN1" in text
    assert "window 0 control: " in text and "pipeline control" in text
    assert "on failure: retry:2" in text
    assert text.count("-- step ") == 6
    assert "== stage 3: parallel group dev 3, 4" in text
    assert "   window: step-2-architect" in text
    assert '   gate: after the step: "Approve? [y/n/r/s]"' in text
    assert "politerm.testing.fakeagent" in text and "--scenario pipeline-step" in text
    assert "worktree branch: poli/RUN1/step-3" in text
    assert "   | HANDOFF_FILE=.handoff-step-4.md" in text
    assert "   |   <NONCE> = <nonce>" in text
    assert "   | add a --verbose flag" not in text  # the task is in .handoff.md, not the prompt
    assert not (tmp_path / ".poli").exists() and not (tmp_path / ".handoff.md").exists()
    out = _poli(tmp_path, "run", "bugfix", "--task", "x", "--cli", "claude", "--dry-run",
                "--run-id", "R9", "--headless", "--unsafe")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "politerm.pipeline._headless --exit-file" in out.stdout
    assert (
        f"-- claude --allowedTools '{CLAUDE_ALLOWED_TOOLS}' -p --dangerously-skip-permissions"
        in out.stdout
    )
    assert "Then stop: your exit status tells whether the step succeeded." in out.stdout
    assert not (tmp_path / ".poli").exists()


def test_invalid_pipeline_error_holds_every_problem(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.pipeline"
    path.write_text("1 | nobody | - | auto | - | - | x\n")
    with pytest.raises(PipelineInvalid) as info:
        load_pipeline(path, tmp_path)
    assert len(info.value.problems) == 3
    assert str(info.value).endswith("(+2 more)")
