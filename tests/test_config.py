"""Configuration: layering of defaults, user file, project file and environment; errors."""

from __future__ import annotations

import json
import subprocess
import sys
import typing as t
from pathlib import Path

import platformdirs
import pytest

from politerm.config import (
    AgentConfig,
    Config,
    default_store_path,
    load_config,
    user_config_file,
)
from politerm.errors import ConfigError
from politerm.project import project_key


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def write_user(text: str) -> Path:
    path = user_config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load(project: Path, text: str | None = None, env: dict[str, str] | None = None) -> Config:
    if text is not None:
        (project / "poli.toml").write_text(text)
    return load_config(project, env=env or {})


# --- defaults ---------------------------------------------------------------------------


def test_defaults(project: Path) -> None:
    config = load(project)
    assert config.sources == ()
    # Session and store belong to the project by default.
    assert config.project.root == project.resolve()
    assert config.tmux.socket == "poli"
    assert config.tmux.session == config.project.session == f"poli-{project_key(project.resolve())}"
    assert config.store.resolved_path() == config.project.store_path
    assert config.project.key in str(config.store.resolved_path())
    assert (config.tmux.width, config.tmux.height, config.tmux.history_limit) == (200, 50, 200_000)
    assert config.timeouts.plan == 600.0
    assert config.timeouts.exec == 1800.0
    assert config.timeouts.ready == 60.0
    assert config.timeouts.nudge_fraction == 0.5
    assert config.routing.max_rounds == 5
    assert config.routing.max_attempts == 3
    assert config.routing.message_ttl == 3600.0
    assert config.routing.require_nonce is True
    assert (config.routing.approval, config.routing.approval_patterns) == ("ask", [])
    assert str(config.store.resolved_path()).startswith(
        str(platformdirs.user_state_path("politerm"))
    )
    # The global store of older versions is only read when named (see politerm.store.legacy).
    assert config.store.resolved_path() != default_store_path()
    assert set(config.agents) == {"PLANNER", "EXECUTER"}

    planner, executer = config.agent("PLANNER"), config.agent("EXECUTER")
    assert planner.argv()[:3] == [sys.executable, "-m", "politerm.testing.fakeagent"]
    assert planner.argv()[3:5] == ["--mode", "claude"]
    assert planner.argv()[-1].endswith("scenarios/demo-planner.toml")
    assert planner.profile == "fake-claude"
    assert executer.argv()[3:5] == ["--mode", "codex"]
    assert executer.argv()[-1].endswith("scenarios/demo-executer.toml")
    assert executer.profile == "fake-codex"
    assert planner.cwd == project
    assert planner.primer is None


def test_unknown_agent_name_says_what_exists(project: Path) -> None:
    with pytest.raises(ConfigError, match=r"no agent named 'PLANER' \(did you mean 'PLANNER'\?\)"):
        load(project).agent("PLANER")


# --- layering ---------------------------------------------------------------------------


def test_project_overrides_user_with_deep_merge(project: Path) -> None:
    user = write_user(
        '[tmux]\nsocket = "mine"\nwidth = 120\n'
        "[timeouts]\nplan = 30\nexec = 40\n"
        '[agents.PLANNER]\ncommand = "claude"\nenv = { A = "1", B = "2" }\n'
    )
    config = load(
        project,
        '[tmux]\nwidth = 160\n[timeouts]\nplan = 90.5\n[agents.PLANNER]\nenv = { B = "3" }\n',
    )
    assert config.sources == (user, project / "poli.toml")
    assert config.tmux.socket == "mine"  # user key survives
    assert config.tmux.width == 160  # project wins
    assert config.timeouts.plan == 90.5
    assert config.timeouts.exec == 40.0
    planner = config.agent("PLANNER")
    assert planner.argv() == ["claude"]
    assert planner.env == {"A": "1", "B": "3"}
    assert planner.profile == "claude"  # a real command drops the fake agent's profile


def test_user_only(project: Path) -> None:
    write_user("[routing]\nmax_rounds = 9\n")
    assert load(project).routing.max_rounds == 9


def test_env_wins_over_files(project: Path) -> None:
    write_user('[tmux]\nsocket = "user"\n')
    config = load(
        project,
        '[tmux]\nsocket = "project"\n[agents.PLANNER]\ncommand = "codex"\n',
        env={"POLI_TMUX_SOCKET": "env", "PLANNER_CMD": "gemini --yolo"},
    )
    assert config.tmux.socket == "env"
    assert config.agent("PLANNER").argv() == ["gemini", "--yolo"]
    assert config.agent("PLANNER").profile == "gemini"


def test_explicit_config_path(project: Path, tmp_path: Path) -> None:
    (project / "poli.toml").write_text("[tmux]\nwidth = 100\n")
    other = tmp_path / "elsewhere.toml"
    other.write_text("[tmux]\nwidth = 300\n")
    config = load_config(project, config_path=other, env={})
    assert config.tmux.width == 300
    assert config.sources == (other,)


def test_explicit_config_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: config file not found"):
        load_config(tmp_path, config_path=tmp_path / "missing.toml", env={})


def test_relative_paths_are_relative_to_their_file(project: Path) -> None:
    (project / "primer.md").write_text("hello")
    (project / "sub").mkdir()
    config = load(
        project,
        '[store]\npath = "runs.db"\n'
        '[agents.PLANNER]\ncwd = "sub"\nprimer = "primer.md"\n'
        "[agents.EXECUTER]\nprimer = false\n",
    )
    assert config.store.resolved_path() == project / "runs.db"
    assert config.agent("PLANNER").cwd == project / "sub"
    assert config.agent("PLANNER").primer == project / "primer.md"
    # Setting only cwd keeps the built-in fake agent.
    assert config.agent("PLANNER").profile == "fake-claude"
    assert config.agent("EXECUTER").primer is False


class EnvCase(t.NamedTuple):
    test_id: str
    var: str
    value: str
    get: t.Callable[[Config], object]
    expected: object


ENV_CASES = [
    EnvCase(
        "planner-cmd",
        "PLANNER_CMD",
        "claude --continue",
        lambda c: c.agent("PLANNER").argv(),
        ["claude", "--continue"],
    ),
    EnvCase(
        "executer-cmd", "EXECUTER_CMD", "aider", lambda c: c.agent("EXECUTER").argv(), ["aider"]
    ),
    EnvCase(
        "planner-cwd", "PLANNER_CWD", "/srv/a", lambda c: c.agent("PLANNER").cwd, Path("/srv/a")
    ),
    EnvCase(
        "executer-cwd", "EXECUTER_CWD", "/srv/b", lambda c: c.agent("EXECUTER").cwd, Path("/srv/b")
    ),
    EnvCase("socket", "POLI_TMUX_SOCKET", "sock1", lambda c: c.tmux.socket, "sock1"),
    EnvCase("session", "POLI_TMUX_SESSION", "sess1", lambda c: c.tmux.session, "sess1"),
    EnvCase("plan-timeout", "POLI_PLAN_TIMEOUT", "12.5", lambda c: c.timeouts.plan, 12.5),
    EnvCase("exec-timeout", "POLI_EXEC_TIMEOUT", "7", lambda c: c.timeouts.exec, 7.0),
    EnvCase("empty-is-unset", "POLI_PLAN_TIMEOUT", "", lambda c: c.timeouts.plan, 600.0),
]


@pytest.mark.parametrize("case", ENV_CASES, ids=[c.test_id for c in ENV_CASES])
def test_each_env_var(project: Path, case: EnvCase) -> None:
    config = load(project, "[timeouts]\nplan = 600\n", env={case.var: case.value})
    assert case.get(config) == case.expected


def test_env_defaults_to_process_environment(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLI_TMUX_SESSION", "from-os")
    assert load_config(project).tmux.session == "from-os"


# --- commands and extra agents -----------------------------------------------------------


class CommandCase(t.NamedTuple):
    test_id: str
    toml: str
    argv: list[str]
    profile: str


COMMAND_CASES = [
    CommandCase(
        "string", 'command = "claude --model opus"', ["claude", "--model", "opus"], "claude"
    ),
    CommandCase(
        "quoted-string", """command = "aider --msg 'a b'" """, ["aider", "--msg", "a b"], "aider"
    ),
    CommandCase(
        "list",
        'command = ["/opt/bin/codex", "--full-auto"]',
        ["/opt/bin/codex", "--full-auto"],
        "codex",
    ),
    CommandCase("generic", 'command = ["bash", "-i"]', ["bash", "-i"], "generic"),
    CommandCase("explicit-profile", 'command = "mytool"\nprofile = "claude"', ["mytool"], "claude"),
]


@pytest.mark.parametrize("case", COMMAND_CASES, ids=[c.test_id for c in COMMAND_CASES])
def test_command_string_or_list(project: Path, case: CommandCase) -> None:
    agent = load(project, f"[agents.EXECUTER]\n{case.toml}\n").agent("EXECUTER")
    assert agent.argv() == case.argv
    assert agent.profile == case.profile


def test_agents_beyond_planner_and_executer(project: Path) -> None:
    config = load(
        project,
        '[agents.REVIEWER]\ncommand = ["opencode"]\nresume_args = ["--continue"]\n'
        "ready_regex = '^> $'\n"
        '[agents.shell]\ncommand = "sh"\nenv = { PS1 = "$ " }\n',
    )
    assert set(config.agents) == {"PLANNER", "EXECUTER", "REVIEWER", "shell"}
    reviewer = config.agent("REVIEWER")
    assert reviewer.profile == "opencode"
    assert reviewer.resume_args == ["--continue"]
    assert reviewer.ready_regex == "^> $"
    assert reviewer.cwd == project
    assert config.agent("shell").env == {"PS1": "$ "}
    assert config.agent("PLANNER").profile == "fake-claude"


def test_a_profile_alone_runs_that_profiles_program(project: Path) -> None:
    from politerm.agents import load_profile

    config = load(
        project,
        '[agents.EXECUTER]\nprofile = "fake"\n[agents.HELPER]\nprofile = "fake-plain"\n',
    )
    # Not the built-in EXECUTER's fake agent in codex mode: the fake profile's own program.
    assert config.agent("EXECUTER").argv() == list(load_profile("fake").command)
    assert config.agent("EXECUTER").argv()[-2:] == ["--mode", "claude"]
    assert config.agent("HELPER").argv() == list(load_profile("fake-plain").command)
    assert config.agent("PLANNER").profile == "fake-claude"  # untouched: the demo agent
    with pytest.raises(ConfigError, match=r"agents\.HELPER\.profile: .*nope"):
        load(project, '[agents.HELPER]\nprofile = "nope"\n')


def test_agent_config_direct() -> None:
    assert AgentConfig(command="claude").profile == "claude"


# --- errors -----------------------------------------------------------------------------


class ErrorCase(t.NamedTuple):
    test_id: str
    toml: str
    message: str  # the whole message after "poli.toml: "


ERROR_CASES = [
    ErrorCase(
        "string-for-seconds",
        '[timeouts]\nplan = "abc"',
        "timeouts.plan: expected a number of seconds > 0, got 'abc'",
    ),
    ErrorCase(
        "negative-seconds",
        "[timeouts]\nexec = -1",
        "timeouts.exec: expected a number of seconds > 0, got -1",
    ),
    ErrorCase(
        "fraction",
        "[timeouts]\nnudge_fraction = 1.5",
        "timeouts.nudge_fraction: expected a fraction between 0 and 1, got 1.5",
    ),
    ErrorCase(
        "bool-for-int",
        "[tmux]\nwidth = true",
        "tmux.width: expected a whole number of columns from 20 to 10000, got True",
    ),
    ErrorCase(
        "float-for-int",
        "[routing]\nmax_rounds = 2.5",
        "routing.max_rounds: expected a whole number >= 1, got 2.5",
    ),
    ErrorCase(
        "string-for-bool",
        '[routing]\nrequire_nonce = "yes"',
        "routing.require_nonce: expected true or false, got 'yes'",
    ),
    ErrorCase(
        "socket-with-slash",
        '[tmux]\nsocket = "a/b"',
        "tmux.socket: expected a socket name without '/' or spaces (tmux -L), got 'a/b'",
    ),
    ErrorCase("section-not-table", "tmux = 3", "tmux: expected a table, got 3"),
    ErrorCase(
        "agent-not-table",
        '[agents]\nPLANNER = "claude"',
        "agents.PLANNER: expected a table, got 'claude'",
    ),
    ErrorCase(
        "command-list-of-ints",
        "[agents.X]\ncommand = [1, 2]",
        "agents.X.command: expected a command string or a non-empty list of strings, got [1, 2]",
    ),
    ErrorCase(
        "command-empty",
        '[agents.X]\ncommand = ""',
        "agents.X.command: expected a command string or a non-empty list of strings, "
        "got '' (it is empty)",
    ),
    ErrorCase(
        "command-missing",
        '[agents.X]\nenv = { A = "1" }',
        "agents.X.command: missing, expected a command string or a non-empty list of strings",
    ),
    ErrorCase(
        "env-not-strings",
        '[agents.X]\ncommand = "sh"\nenv = { A = 1 }',
        "agents.X.env.A: expected a table of strings, got 1",
    ),
    ErrorCase(
        "primer-true",
        '[agents.X]\ncommand = "sh"\nprimer = true',
        "agents.X.primer: expected a path to an existing primer file, or false, got True",
    ),
    ErrorCase(
        "bad-regex",
        "[agents.X]\ncommand = \"sh\"\nready_regex = '('",
        "agents.X.ready_regex: expected a valid regular expression, got '(' "
        "(missing ), unterminated subpattern at position 0)",
    ),
    ErrorCase(
        "unknown-key-close",
        "[timeouts]\nplna = 3",
        "timeouts.plna: unknown key (did you mean 'plan'?)",
    ),
    ErrorCase(
        "unknown-section-close",
        "[tiemouts]\nplan = 3",
        "tiemouts: unknown key (did you mean 'timeouts'?)",
    ),
    ErrorCase(
        "unknown-agent-key",
        '[agents.PLANNER]\ncomand = "claude"',
        "agents.PLANNER.comand: unknown key (did you mean 'command'?)",
    ),
    ErrorCase(
        "unknown-key-far",
        "[routing]\ncolour = 3",
        "routing.colour: unknown key; expected one of: max_rounds, max_attempts, "
        "message_ttl, require_nonce, contract, approval, approval_patterns",
    ),
    ErrorCase(
        "approval-mode",
        '[routing]\napproval = "maybe"',
        "routing.approval: expected one of 'ask', 'approve', 'deny', got 'maybe'",
    ),
    ErrorCase(
        "approval-pattern-regex",
        '[routing]\napproval_patterns = ["("]',
        "routing.approval_patterns: expected a list of regular expressions, got ['('] "
        "('(': missing ), unterminated subpattern at position 0)",
    ),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.test_id for c in ERROR_CASES])
def test_bad_value_names_file_key_and_expectation(
    project: Path, monkeypatch: pytest.MonkeyPatch, case: ErrorCase
) -> None:
    monkeypatch.chdir(project)  # so the file is shown as plain "poli.toml"
    with pytest.raises(ConfigError) as info:
        load(project, case.toml + "\n")
    assert str(info.value) == f"poli.toml: {case.message}"
    assert "\n" not in str(info.value)


def test_bad_value_in_user_file_names_user_file(project: Path) -> None:
    user = write_user("[timeouts]\nready = 0\n")
    with pytest.raises(ConfigError) as info:
        load(project, "[timeouts]\nplan = 5\n")
    assert str(info.value) == f"{user}: timeouts.ready: expected a number of seconds > 0, got 0"


def test_missing_primer_file(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    with pytest.raises(ConfigError, match=r"^poli.toml: agents.PLANNER.primer: .*nope.md'"):
        load(project, '[agents.PLANNER]\nprimer = "nope.md"\n')


def test_invalid_toml_names_line_and_column(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    with pytest.raises(ConfigError) as info:
        load(project, '[tmux]\nsocket = "a"\nwidth = \n')
    assert str(info.value) == "poli.toml: line 3, column 9: invalid TOML: Invalid value"


class EnvErrorCase(t.NamedTuple):
    test_id: str
    var: str
    value: str
    message: str


ENV_ERROR_CASES = [
    EnvErrorCase(
        "plan-not-number",
        "POLI_PLAN_TIMEOUT",
        "x",
        "POLI_PLAN_TIMEOUT: expected a number of seconds > 0, got 'x'",
    ),
    EnvErrorCase(
        "exec-zero",
        "POLI_EXEC_TIMEOUT",
        "0",
        "POLI_EXEC_TIMEOUT: expected a number of seconds > 0, got '0'",
    ),
    EnvErrorCase(
        "exec-inf",
        "POLI_EXEC_TIMEOUT",
        "inf",
        "POLI_EXEC_TIMEOUT: expected a number of seconds > 0, got 'inf'",
    ),
    EnvErrorCase(
        "session-colon",
        "POLI_TMUX_SESSION",
        "a:b",
        "POLI_TMUX_SESSION: expected a session name without ':', '.' or spaces, got 'a:b'",
    ),
    EnvErrorCase(
        "cmd-unbalanced",
        "EXECUTER_CMD",
        "codex 'x",
        "EXECUTER_CMD: expected a command string or a non-empty list of strings, "
        'got "codex \'x" (cannot split it: No closing quotation)',
    ),
]


@pytest.mark.parametrize("case", ENV_ERROR_CASES, ids=[c.test_id for c in ENV_ERROR_CASES])
def test_bad_env_var_names_the_variable(project: Path, case: EnvErrorCase) -> None:
    with pytest.raises(ConfigError) as info:
        load(project, env={case.var: case.value})
    assert str(info.value) == case.message


def test_bad_agent_name(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    with pytest.raises(ConfigError, match=r"^poli.toml: agents: expected names .*got 'a.b'$"):
        load(project, '[agents."a.b"]\ncommand = "sh"\n')


def test_poli_config_command(project: Path) -> None:
    (project / "poli.toml").write_text("[tmux]\nwidth = 123\n")
    ok = subprocess.run(
        [sys.executable, "-m", "politerm", "config"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    document = json.loads(ok.stdout)
    assert document["tmux"]["width"] == 123
    assert document["sources"] == [str(project / "poli.toml")]
    assert document["agents"]["PLANNER"]["profile"] == "fake-claude"

    (project / "poli.toml").write_text("[tmux]\nwidht = 123\n")
    bad = subprocess.run(
        [sys.executable, "-m", "politerm", "config"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr == "poli: poli.toml: tmux.widht: unknown key (did you mean 'width'?)\n"
