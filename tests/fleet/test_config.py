"""The ``[fleet]`` table and ``[agents.X] node``/``nodes``: values, defaults, one-line errors."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest

from politerm.config import load_config
from politerm.errors import ConfigError

SECRET = "s3cretpassw0rd"


def load(project: Path, text: str, env: dict[str, str] | None = None) -> t.Any:
    (project / "poli.toml").write_text(text)
    return load_config(project, env=env or {})


def test_without_a_fleet_table_nothing_changes(tmp_path: Path) -> None:
    config = load(tmp_path, '[agents.EXECUTER]\ncommand = "sh"\nnode = "b"\n')
    assert config.fleet is None
    assert config.agent("EXECUTER").hosts() == ("b",)
    assert config.agent("PLANNER").hosts() is None


def test_a_fleet_table_with_its_defaults_and_the_node_from_the_environment(
    tmp_path: Path,
) -> None:
    config = load(
        tmp_path,
        f'[fleet]\nurl = "redis://poli:{SECRET}@10.0.0.5:6379/0"\nnode = "a"\n'
        '[agents.EXECUTER]\ncommand = "sh"\nnodes = ["b", "c"]\n',
        env={"POLI_FLEET_NODE": "c"},
    )
    fleet = config.fleet
    assert (fleet.node, fleet.lease, fleet.margin, fleet.max_attempts) == ("c", 30.0, 5.0, 3)
    assert fleet.project_name(tmp_path / "my shop") == "my-shop"
    assert config.agent("EXECUTER").hosts() == ("b", "c")
    # `poli config` prints model_dump(mode="json"): the password never goes with it.
    dumped = json.dumps(config.model_dump(mode="json"))
    assert SECRET not in dumped
    assert "redis://poli:***@10.0.0.5:6379/0" in dumped


class BadCase(t.NamedTuple):
    test_id: str
    toml: str
    message: str


BAD_CASES = [
    BadCase(
        "url-scheme",
        f'[fleet]\nurl = "http://u:{SECRET}@h"',
        "fleet.url: expected a redis:// or rediss:// URL (with an ACL user unless on "
        "loopback), got 'http://u:***@h'",
    ),
    BadCase(
        "url-port",
        f'[fleet]\nurl = "redis://u:{SECRET}@h:99999"',
        "fleet.url: expected a redis:// or rediss:// URL (with an ACL user unless on "
        "loopback), got 'redis://u:***@h:99999' (not a URL (ValueError))",
    ),
    BadCase(
        "url-bracket",
        f'[fleet]\nurl = "redis://u:{SECRET}@[::1"',
        "fleet.url: expected a redis:// or rediss:// URL (with an ACL user unless on "
        "loopback), got 'redis://***@[::1' (not a URL (ValueError))",
    ),
    BadCase("url-missing", '[fleet]\nnode = "a"', "fleet.url: missing, expected a redis://"),
    BadCase(
        "lease",
        '[fleet]\nurl = "redis://127.0.0.1"\nlease = 0',
        "fleet.lease: expected seconds from 1 to 86400, got 0",
    ),
    BadCase(
        "margin",
        '[fleet]\nurl = "redis://127.0.0.1"\nlease = 10\nmargin = 10',
        "fleet.margin: expected seconds >= 0, less than lease",
    ),
    BadCase(
        "node-name",
        '[fleet]\nurl = "redis://127.0.0.1"\nnode = "a b"',
        "fleet.node: expected this machine's node name",
    ),
    BadCase(
        "budget",
        '[fleet]\nurl = "redis://127.0.0.1"\n[fleet.budget]\ntokens_per_day = -1',
        "fleet.budget.tokens_per_day: expected a whole number > 0",
    ),
    BadCase(
        "agent-both",
        '[agents.X]\ncommand = "sh"\nnode = "a"\nnodes = ["b"]',
        "agents.X.nodes: expected a non-empty list of fleet node names",
    ),
    BadCase(
        "agent-pool-empty",
        '[agents.X]\ncommand = "sh"\nnodes = []',
        "agents.X.nodes: expected a non-empty list",
    ),
    BadCase(
        "unknown-key",
        '[fleet]\nurl = "redis://127.0.0.1"\nleese = 3',
        "fleet.leese: unknown key (did you mean 'lease'?)",
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=[c.test_id for c in BAD_CASES])
def test_a_bad_value_is_one_line_naming_the_key_and_never_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: BadCase
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, case.toml + "\n")
    message = str(info.value)
    assert message.startswith(f"poli.toml: {case.message}")
    assert "\n" not in message
    assert SECRET not in message


def test_the_node_variable_is_checked_and_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^POLI_FLEET_NODE: expected this machine's node"):
        load(tmp_path, '[fleet]\nurl = "redis://127.0.0.1"\n', env={"POLI_FLEET_NODE": "a/b"})
