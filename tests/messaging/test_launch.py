"""What agents are started with: identity, no tmux variables, MCP registration per CLI."""

from __future__ import annotations

import json
import pathlib
import stat
import tomllib
import typing as t

import pytest

from politerm.driver.launch import prepare_launch
from politerm.errors import ConfigError, HookError
from politerm.hooks.install import GEMINI_USER_LINK, gemini_home, gemini_settings
from politerm.hooks.mcp import server_command
from tests.messaging.helpers import config_of, write_config


class Case(t.NamedTuple):
    test_id: str
    profile: str
    argv: list[str]


CASES = [
    Case("claude", "claude", ["claude"]),
    Case("codex", "codex", ["codex", "--no-daemon"]),
    Case("gemini", "gemini", ["gemini"]),
    Case("opencode", "opencode", ["opencode"]),
    Case("by-program-name", "generic", ["/opt/bin/claude"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test_id for c in CASES])
def test_mcp_registration_per_cli(case: Case, tmp_path: pathlib.Path) -> None:
    cfg_path = write_config(tmp_path)
    config = config_of(cfg_path)
    argv, env = prepare_launch(
        config, "ORCH", case.profile, case.argv, {"KEEP": "1"}, mcp=True, config_file=cfg_path
    )
    assert argv[:5] == ["env", "-u", "TMUX", "-u", "TMUX_PANE"]
    assert argv[5 : 5 + len(case.argv)] == case.argv
    assert env["KEEP"] == "1"
    assert env["POLI_AGENT"] == "ORCH"
    assert env["POLI_CONFIG"] == str(cfg_path)
    ident = {
        "POLI_AGENT": "ORCH",
        "POLI_PROJECT": str(config.project.root),
        "POLI_TMUX_SOCKET": "msgtest",
        "POLI_TMUX_SESSION": "mail",
        "POLI_CONFIG": str(cfg_path),
    }
    command = server_command()
    rest = argv[5 + len(case.argv) :]
    if case.argv[0].endswith("claude"):
        assert rest[0] == "--mcp-config"
        assert rest[2:] == ["--allowedTools", "mcp__poli"]
        path = pathlib.Path(rest[1])
        spec = json.loads(path.read_text())["mcpServers"]["poli"]
        assert [spec["command"], *spec["args"]] == command
        assert spec["env"] == ident
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    elif case.profile == "codex":
        overrides = dict(rest[i + 1].split("=", 1) for i in range(0, len(rest), 2))
        assert all(rest[i] == "-c" for i in range(0, len(rest), 2))
        table = tomllib.loads("\n".join(f"{k} = {v}" for k, v in overrides.items()))
        server = table["mcp_servers"]["poli"]
        assert [server["command"], *server["args"]] == command
        assert server["env"] == ident
    elif case.profile == "gemini":
        assert rest == []
        settings = pathlib.Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
        assert stat.S_IMODE(settings.stat().st_mode) == 0o600
        spec = json.loads(settings.read_text())
        server = spec["mcpServers"]["poli"]
        assert [server["command"], *server["args"]] == command
        assert server["env"] == ident
        # Gemini's default call timeout, stated: `gemini mcp list` would give up after 5 s
        assert server["timeout"] == 600_000
    else:
        assert rest == []
        spec = json.loads(pathlib.Path(env["OPENCODE_CONFIG"]).read_text())
        server = spec["mcp"]["poli"]
        assert (server["type"], server["command"], server["environment"]) == (
            "local",
            command,
            ident,
        )


def test_mcp_on_an_agent_that_cannot_load_it_is_a_one_line_error(tmp_path: pathlib.Path) -> None:
    config = config_of(write_config(tmp_path))
    with pytest.raises(ConfigError, match=r"agents\.W1\.mcp: profile 'fake-claude' cannot"):
        prepare_launch(config, "W1", "fake-claude", ["python", "-m", "x"], {}, mcp=True)


def test_without_mcp_only_identity_and_no_tmux(tmp_path: pathlib.Path) -> None:
    config = config_of(write_config(tmp_path))
    argv, env = prepare_launch(config, "W1", "claude", ["claude"], {"A": "b"})
    assert argv == ["env", "-u", "TMUX", "-u", "TMUX_PANE", "claude"]
    assert env == {
        "A": "b",
        "POLI_AGENT": "W1",
        "POLI_PROJECT": str(config.project.root),
        "POLI_TMUX_SOCKET": "msgtest",
        "POLI_TMUX_SESSION": "mail",
    }


def test_mcp_is_a_config_key(tmp_path: pathlib.Path) -> None:
    cfg = write_config(tmp_path, extra='[agents.W1]\ncommand = "claude"\nmcp = true\n')
    assert config_of(cfg).agents["W1"].mcp is True
    bad = write_config(tmp_path, extra='[agents.W1]\ncommand = "claude"\nmcp = "yes"\n')
    with pytest.raises(ConfigError, match=r"agents\.W1\.mcp"):
        config_of(bad)


def test_gemini_keeps_the_users_own_settings_and_files(tmp_path: pathlib.Path) -> None:
    own = tmp_path / "home" / ".gemini"
    own.mkdir(parents=True)
    (own / "settings.json").write_text('{"security": {"auth": {"selectedType": "gemini-api-key"}}}')
    (own / "trustedFolders.json").write_text('{"/w": "TRUST_FOLDER"}')
    config = config_of(write_config(tmp_path))
    home_env = {"HOME": str(tmp_path / "home")}
    _, env = prepare_launch(config, "G", "gemini", ["gemini"], home_env, mcp=True)
    mine = pathlib.Path(env["GEMINI_CLI_HOME"]) / ".gemini"
    settings = json.loads((mine / "settings.json").read_text())
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert settings["mcpServers"]["poli"]["env"]["POLI_AGENT"] == "G"
    assert (mine / "trustedFolders.json").resolve() == own / "trustedFolders.json"
    assert json.loads((own / "settings.json").read_text()).get("mcpServers") is None
    # the receipt hooks stack on it, and what Gemini makes still goes back to the user's
    channel = tmp_path / "hooks" / "G.hooks.jsonl"
    hooked = gemini_home(channel, env, gemini_settings(channel))
    both = json.loads((hooked / ".gemini" / "settings.json").read_text())
    assert set(both["mcpServers"]) == {"poli"}
    assert both["hooks"]
    assert both["security"] == settings["security"]
    assert (hooked / GEMINI_USER_LINK).readlink() == own
    (own / "settings.json").write_text("{not json")
    with pytest.raises(HookError, match=r"cannot read .*settings\.json"):
        prepare_launch(config, "G", "gemini", ["gemini"], home_env, mcp=True)
