"""Loading the configuration: layers with provenance, environment variables, one-line errors."""

from __future__ import annotations

import copy
import os
import re
import sys
import tomllib
import typing as t
from pathlib import Path

from pydantic import BaseModel, ValidationError

from politerm.config.fleet import redact_url
from politerm.config.sections import (
    _AGENT_NAME_RE,
    CONFIG_FILENAME,
    DEFAULT_AGENTS,
    Config,
    did_you_mean,
    parse_seconds,
    user_config_file,
)
from politerm.errors import ConfigError
from politerm.project import find_project

if t.TYPE_CHECKING:
    from collections.abc import Mapping


def _scenario(name: str) -> str:
    # Computed, not imported: the fake agent package may be absent in a trimmed install.
    return str(Path(__file__).parent.parent / "testing" / "fakeagent" / "scenarios" / name)


def _builtin_agents(project_dir: Path) -> dict[str, dict[str, t.Any]]:
    fake = [sys.executable, "-m", "politerm.testing.fakeagent"]
    return {
        "PLANNER": {
            "command": [*fake, "--mode", "claude", "--scenario", _scenario("demo-planner.toml")],
            "profile": "fake-claude",
            "cwd": project_dir,
        },
        "EXECUTER": {
            "command": [*fake, "--mode", "codex", "--scenario", _scenario("demo-executer.toml")],
            "profile": "fake-codex",
            "cwd": project_dir,
        },
    }


# --- layers and provenance --------------------------------------------------------------

_Key = tuple[str, ...]


class _Layers:
    """The merged raw data plus, for every key, the file or variable that set it last."""

    def __init__(self) -> None:
        self.data: dict[str, t.Any] = {}
        self.origin: dict[_Key, str] = {}

    def apply(self, layer: Mapping[str, t.Any], source: str) -> None:
        _merge(self.data, layer, (), source, self.origin)

    def source_of(self, key: _Key) -> str:
        for end in range(len(key), 0, -1):
            if key[:end] in self.origin:
                return self.origin[key[:end]]
        return "built-in defaults"


def _merge(
    into: dict[str, t.Any],
    layer: Mapping[str, t.Any],
    prefix: _Key,
    source: str,
    origin: dict[_Key, str],
) -> None:
    for key, value in layer.items():
        path = (*prefix, key)
        origin[path] = source
        if isinstance(value, dict):
            # Recurse even into a new table, so every nested key records its source.
            if not isinstance(into.get(key), dict):
                into[key] = {}
            _merge(into[key], value, path, source, origin)
        else:
            into[key] = copy.deepcopy(value)


def _anchor_paths(data: dict[str, t.Any], base: Path) -> None:
    """Turn path strings into absolute :class:`Path` objects, relative to ``base``.

    A relative path in a file means relative to that file, not to wherever poli was started.
    Values of the wrong type are left alone for validation to report.
    """

    def anchor(table: t.Any, key: str) -> None:
        if isinstance(table, dict) and isinstance(table.get(key), str):
            table[key] = base / Path(table[key]).expanduser()

    anchor(data.get("store"), "path")
    for key in ("base", "epic", "item", "report", "summary", "combine"):
        anchor(data.get("epic"), f"{key}_prompt")
    templates = data.get("templates")
    if isinstance(templates, dict):
        for name in list(templates):
            anchor(templates, name)
    agents = data.get("agents")
    if isinstance(agents, dict):
        for agent in agents.values():
            anchor(agent, "cwd")
            anchor(agent, "primer")


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


_TOML_POSITION_RE = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def _read_toml(path: Path) -> dict[str, t.Any]:
    shown = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        msg = f"{shown}: config file not found"
        raise ConfigError(msg) from None
    except IsADirectoryError:
        msg = f"{shown}: is a directory, not a config file"
        raise ConfigError(msg) from None
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{shown}: cannot read config file: {exc}"
        raise ConfigError(msg) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_POSITION_RE.match(str(exc))
        if match:
            msg = (
                f"{shown}: line {match['line']}, column {match['col']}: "
                f"invalid TOML: {match['msg']}"
            )
        else:
            msg = f"{shown}: invalid TOML: {exc}"
        raise ConfigError(msg) from None
    _anchor_paths(data, path.parent)
    return data


def _env_layer(env: Mapping[str, str], cwd: Path) -> list[tuple[str, dict[str, t.Any]]]:
    """One single-key layer per environment variable, so errors can name the variable."""
    layers: list[tuple[str, dict[str, t.Any]]] = []

    def get(name: str) -> str | None:
        # An empty variable counts as unset: ``PLANNER_CMD= poli …`` is how one unsets it.
        value = env.get(name, "")
        return value or None

    for agent in DEFAULT_AGENTS:
        if (command := get(f"{agent}_CMD")) is not None:
            layers.append((f"{agent}_CMD", {"agents": {agent: {"command": command}}}))
        if (cwd_value := get(f"{agent}_CWD")) is not None:
            where = cwd / Path(cwd_value).expanduser()
            layers.append((f"{agent}_CWD", {"agents": {agent: {"cwd": where}}}))
    for name, section, key in (
        ("POLI_TMUX_SOCKET", "tmux", "socket"),
        ("POLI_TMUX_SESSION", "tmux", "session"),
    ):
        if (value := get(name)) is not None:
            layers.append((name, {section: {key: value}}))
    for name, key in (("POLI_PLAN_TIMEOUT", "plan"), ("POLI_EXEC_TIMEOUT", "exec")):
        if (value := get(name)) is not None:
            layers.append((name, {"timeouts": {key: parse_seconds(name, value)}}))
    return layers


ENV_VARS: tuple[str, ...] = (
    "PLANNER_CMD",
    "PLANNER_CWD",
    "EXECUTER_CMD",
    "EXECUTER_CWD",
    "POLI_TMUX_SOCKET",
    "POLI_TMUX_SESSION",
    "POLI_PLAN_TIMEOUT",
    "POLI_EXEC_TIMEOUT",
    "POLI_FLEET_NODE",
)
"""Environment variables that override the files."""


# --- validation errors ------------------------------------------------------------------


def _unwrap_optional(annotation: t.Any) -> t.Any:
    """``X`` for an optional table ``X | None`` (``[fleet]``), else ``annotation`` as it is."""
    args = [a for a in t.get_args(annotation) if a is not type(None)]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return annotation


def _describe(error: Mapping[str, t.Any]) -> tuple[_Key, str, type[BaseModel] | None, str | None]:
    """Walk a pydantic error location through the models.

    Returns the key path of the deepest configuration key, the model that holds it, and that
    key's ``description`` (what we expect there).
    """
    current: t.Any = Config
    key: list[str] = []
    owner: type[BaseModel] | None = None
    expected: str | None = None
    for part in error["loc"]:
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str):
                break
            key.append(part)
            owner = current
            info = current.model_fields.get(part)
            if info is None:
                break
            expected = info.description or expected
            current = _unwrap_optional(info.annotation)
        elif t.get_origin(current) is dict and isinstance(part, str):
            key.append(part)
            current = t.get_args(current)[1]
        else:
            # inside a union, list or plain value: the key found so far is what to report
            break
    else:
        if isinstance(current, type) and issubclass(current, BaseModel):
            expected = "a table"
    return tuple(key), error["type"], owner, expected


def _lookup(data: Mapping[str, t.Any], key: _Key) -> tuple[bool, t.Any]:
    value: t.Any = data
    for part in key:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _command_from_profile(name: str, table: dict[str, t.Any], layers: _Layers) -> None:
    """An agent given only a profile runs that profile's program (its ``command``).

    Without this, PLANNER/EXECUTER kept the built-in fake agent's command of another mode,
    and any other agent was refused for a missing command the profile knew.
    """
    from politerm.agents.profile import load_profile
    from politerm.errors import ProfileError

    profile = table.get("profile")
    if not isinstance(profile, str) or not profile:
        return  # validation says what is wrong with it
    where = layers.source_of(("agents", name, "profile"))
    try:
        command = list(load_profile(profile).command)
    except ProfileError as exc:
        msg = f"{where}: agents.{name}.profile: {exc}"
        raise ConfigError(msg) from None
    if command:
        table["command"] = command


def _config_error(exc: ValidationError, layers: _Layers) -> ConfigError:
    errors = exc.errors()
    # An unknown key is the likeliest root cause of the rest; report it first.
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    error = errors[0]
    key, kind, owner, expected = _describe(error)
    source = layers.source_of(key)
    where = source if source in ENV_VARS else f"{source}: {'.'.join(key) or '(top level)'}"
    if kind == "extra_forbidden" and owner is not None:
        valid = list(owner.model_fields)
        hint = did_you_mean(key[-1], valid) or f"; expected one of: {', '.join(valid)}"
        return ConfigError(f"{where}: unknown key{hint}")
    if kind == "missing":
        return ConfigError(f"{where}: missing, expected {expected or 'a value'}")
    found, value = _lookup(layers.data, key)
    if key == ("fleet", "url") and isinstance(value, str):
        value = redact_url(value)  # a bad URL is shown, its password never
    elif key == ("fleet",) and isinstance(value, dict) and isinstance(value.get("url"), str):
        value = {**value, "url": redact_url(value["url"])}
    got = repr(str(value) if isinstance(value, Path) else value) if found else "nothing"
    reason = ""
    if kind == "value_error":
        reason = f" ({error.get('ctx', {}).get('error', error['msg'])!s})"
    if expected is None:
        return ConfigError(f"{where}: {error['msg']}, got {got}")
    return ConfigError(f"{where}: expected {expected}, got {got}{reason}")


# --- loading ----------------------------------------------------------------------------

#: The file this process reads instead of the project's poli.toml (``--config`` of the
#: pipeline commands, whose library calls load the configuration in many places). Kept out
#: of the environment: the tmux server and every agent would inherit it.
_process_file: Path | None = None


def use_config_file(path: Path | None) -> None:
    """Make :func:`load_config` read ``path`` instead of ``poli.toml`` in this process.

    ``None`` goes back to the project's file; a ``config_path`` given to :func:`load_config`
    still wins.
    """
    global _process_file  # one setting per process, made by the CLI
    _process_file = path.absolute() if path is not None else None


def load_config(
    project_dir: Path | None = None,
    *,
    config_path: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Load the configuration: built-in defaults, user file, project file, environment.

    Parameters
    ----------
    project_dir
        The project: where ``poli.toml`` is read, the default working directory of agents,
        and what the default session and store are named after. ``None`` finds it
        (``POLI_PROJECT``, else the nearest ``poli.toml`` upwards, else the git root, else
        the current directory; see :mod:`politerm.project`).
    config_path
        Read this file instead of ``<project_dir>/poli.toml``; it must exist. Default: the
        file given to :func:`use_config_file`, if any.
    env
        Environment variables to apply; ``None`` uses :data:`os.environ`.

    Returns
    -------
    Config
        The validated configuration; :attr:`Config.sources` lists the files read.

    Raises
    ------
    ConfigError
        Naming the file (or variable), the dotted key and the expected value.
    """
    env = os.environ if env is None else env
    config_path = config_path or _process_file
    found = find_project(project_dir, env=env)
    project = found.root
    layers = _Layers()
    sources: list[Path] = []

    user_file = user_config_file()
    if user_file.exists():
        layers.apply(_read_toml(user_file), _display(user_file))
        sources.append(user_file)
    project_file = (config_path or project / CONFIG_FILENAME).absolute()
    # A poli.toml that is there but not a file (a directory) is an error, not "no config".
    if config_path is not None or project_file.exists():
        layers.apply(_read_toml(project_file), _display(project_file))
        sources.append(project_file)
    for name, layer in _env_layer(env, Path.cwd()):
        layers.apply(layer, name)
    # Each machine names its own node; the variable means nothing without a [fleet] table.
    if (node := env.get("POLI_FLEET_NODE", "")) and isinstance(layers.data.get("fleet"), dict):
        layers.apply({"fleet": {"node": node}}, "POLI_FLEET_NODE")

    data = layers.data
    # Per project by default: its own session and store (so its own work queue).
    if isinstance(data.setdefault("tmux", {}), dict):
        data["tmux"].setdefault("session", found.session)
    if isinstance(data.setdefault("store", {}), dict):
        data["store"].setdefault("path", found.store_path)
    agents = data.setdefault("agents", {})
    if isinstance(agents, dict):
        for name in agents:
            if not _AGENT_NAME_RE.match(name):
                where = layers.source_of(("agents", name))
                msg = f"{where}: agents: expected names of letters, digits, _ or -, got {name!r}"
                raise ConfigError(msg)
        for name, table in agents.items():
            if isinstance(table, dict) and "command" not in table:
                _command_from_profile(name, table, layers)
        builtin = _builtin_agents(project)
        for name in DEFAULT_AGENTS:
            table = agents.setdefault(name, {})
            # A user's own command replaces the fake agent as a whole: keeping the fake
            # agent's profile under a real command would be wrong.
            if isinstance(table, dict) and "command" not in table:
                agents[name] = {**builtin[name], **table}
        for table in agents.values():
            if isinstance(table, dict):
                table.setdefault("cwd", project)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, layers) from None
    config._sources = sources
    config._project = found
    return config
