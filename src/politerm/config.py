"""politerm's configuration: TOML files and environment variables, validated by pydantic.

Layers, later ones winning key by key (tables are merged, not replaced):

1. built-in defaults (both agents run the bundled fake agent, so ``poli`` works out of the box);
2. the user file, ``platformdirs.user_config_path("politerm") / "poli.toml"``;
3. the project file, ``poli.toml`` in the project directory (or an explicit ``--config``);
4. environment variables: ``PLANNER_CMD``, ``PLANNER_CWD``, ``EXECUTER_CMD``,
   ``EXECUTER_CWD``, ``POLI_TMUX_SOCKET``, ``POLI_TMUX_SESSION``, ``POLI_PLAN_TIMEOUT``,
   ``POLI_EXEC_TIMEOUT``.

Every bad value raises a :class:`~politerm.errors.ConfigError` whose one-line message names
where the value came from (file or variable), the dotted key and what was expected.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
import shlex
import sys
import tomllib
import typing as t
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from politerm.errors import ConfigError

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "CONFIG_FILENAME",
    "DEFAULT_AGENTS",
    "ENV_VARS",
    "KNOWN_PROFILES",
    "AgentConfig",
    "Config",
    "EpicConfig",
    "RedactConfig",
    "RoutingConfig",
    "StoreConfig",
    "TimeoutsConfig",
    "TmuxConfig",
    "default_store_path",
    "did_you_mean",
    "guess_profile",
    "load_config",
    "parse_seconds",
    "user_config_file",
]

CONFIG_FILENAME = "poli.toml"
"""Name of the user and project configuration files."""

DEFAULT_AGENTS: tuple[str, ...] = ("PLANNER", "EXECUTER")
"""Agents that always exist, whatever the files say."""

KNOWN_PROFILES: frozenset[str] = frozenset({"claude", "codex", "gemini", "opencode", "aider"})
"""Program names that pick their own agent profile; anything else gets ``"generic"``."""

_SECONDS = "a number of seconds > 0"
_AGENT_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


# --- models -----------------------------------------------------------------------------


class _Section(BaseModel):
    # strict: a TOML string "600" where a number belongs is a mistake worth reporting;
    # environment strings are converted before validation.
    model_config = ConfigDict(extra="forbid", strict=True)


class TmuxConfig(_Section):
    """The private tmux server politerm runs its panes in."""

    socket: str = Field(
        default="poli",
        min_length=1,
        pattern=r"^[^/\s]+$",
        description="a socket name without '/' or spaces (tmux -L)",
    )
    session: str = Field(
        default="poli",
        min_length=1,
        pattern=r"^[^:.\s]+$",
        description="a session name without ':', '.' or spaces",
    )
    width: int = Field(default=200, ge=20, description="a whole number of columns >= 20")
    height: int = Field(default=50, ge=5, description="a whole number of rows >= 5")
    history_limit: int = Field(default=200_000, ge=0, description="a whole number of lines >= 0")


class StoreConfig(_Section):
    """Where runs are recorded."""

    path: Path | None = Field(default=None, description="a file path")

    def resolved_path(self) -> Path:
        """Return :attr:`path`, or the default under the user state directory."""
        return self.path if self.path is not None else default_store_path()


class TimeoutsConfig(_Section):
    """Bounded waits on agents, in seconds."""

    plan: float = Field(default=600.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    exec: float = Field(default=1800.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    ready: float = Field(default=60.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    nudge_fraction: float = Field(
        default=0.5, gt=0, lt=1, allow_inf_nan=False, description="a fraction between 0 and 1"
    )


class RoutingConfig(_Section):
    """How messages move between agents."""

    max_rounds: int = Field(default=5, ge=1, description="a whole number >= 1")
    max_attempts: int = Field(default=3, ge=1, description="a whole number >= 1")
    message_ttl: float = Field(default=3600.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    require_nonce: bool = Field(default=True, description="true or false")
    approval: t.Literal["ask", "approve", "deny"] = Field(
        default="ask", description="one of 'ask', 'approve', 'deny'"
    )
    approval_patterns: list[str] = Field(
        default_factory=list, description="a list of regular expressions"
    )

    @field_validator("approval_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                msg = f"{pattern!r}: {exc}"
                raise ValueError(msg) from None
        return value


_Primer: t.TypeAlias = Path | t.Literal[False] | None


class AgentConfig(_Section):
    """One agent: the program to run in a pane and how to talk to it.

    ``profile`` is always set after validation: when the file leaves it out it is guessed
    from the command's program name (:func:`guess_profile`).
    """

    command: str | list[str] = Field(
        description="a command string or a non-empty list of strings",
    )
    cwd: Path = Field(default=Path(), description="a directory path")
    env: dict[str, str] = Field(default_factory=dict, description="a table of strings")
    profile: str | None = Field(default=None, min_length=1, description="a profile name")
    primer: _Primer = Field(default=None, description="a path to an existing primer file, or false")
    resume_args: list[str] | None = Field(default=None, description="a list of strings")
    ready_regex: str | None = Field(default=None, description="a valid regular expression")
    mcp: bool = Field(default=False, description="true or false (register `poli mcp` in the agent)")

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: str | list[str]) -> str | list[str]:
        try:
            argv = shlex.split(value) if isinstance(value, str) else value
        except ValueError as exc:
            msg = f"cannot split it: {exc}"
            raise ValueError(msg) from None
        if not argv or not argv[0]:
            msg = "it is empty"
            raise ValueError(msg)
        return value

    @field_validator("primer")
    @classmethod
    def _primer_exists(
        cls, value: Path | t.Literal[False] | None
    ) -> Path | t.Literal[False] | None:
        if isinstance(value, Path) and not value.is_file():
            msg = "no such file"
            raise ValueError(msg)
        return value

    @field_validator("ready_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value, re.MULTILINE)
            except re.error as exc:
                msg = str(exc)
                raise ValueError(msg) from None
        return value

    def model_post_init(self, context: t.Any, /) -> None:
        """Fill in the guessed profile."""
        if self.profile is None:
            self.profile = guess_profile(self.argv())

    def argv(self) -> list[str]:
        """Return the command as an argument vector (a string command is shlex-split).

        Examples
        --------
        >>> AgentConfig(command="claude --model 'opus 4'").argv()
        ['claude', '--model', 'opus 4']
        >>> AgentConfig(command=["aider", "--yes"]).argv()
        ['aider', '--yes']
        """
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)


_PROMPT_FILE = "a path to an existing prompt file"


class EpicConfig(_Section):
    """``poli go``: which agent burns an epic down, where work items come from, prompts.

    Prompt files override the built-in layers (``politerm/epic/prompts/*.md``).
    """

    agent: str = Field(default="codex", min_length=1, description="an agent profile name")
    commands: dict[str, list[str]] = Field(
        default_factory=dict, description="a table of profile name = command list"
    )
    source: t.Literal["auto", "bd", "builtin"] = Field(
        default="auto", description="'auto', 'bd' or 'builtin'"
    )
    bd: str = Field(default="bd", min_length=1, description="the bd program")
    session_timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    grace: float = Field(default=120.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    width: int = Field(default=200, ge=20, description="a whole number of columns >= 20")
    height: int = Field(default=50, ge=5, description="a whole number of rows >= 5")
    summary_chunk_chars: int = Field(
        default=12_000, ge=200, description="a whole number of characters >= 200"
    )
    transcripts: bool = Field(default=True, description="true or false")
    base_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)
    epic_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)
    item_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)
    report_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)
    summary_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)
    combine_prompt: Path | None = Field(default=None, description=_PROMPT_FILE)

    @field_validator(
        "base_prompt",
        "epic_prompt",
        "item_prompt",
        "report_prompt",
        "summary_prompt",
        "combine_prompt",
    )
    @classmethod
    def _prompt_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            msg = "no such file"
            raise ValueError(msg)
        return value


class RedactConfig(_Section):
    """Extra secret patterns, redacted like the built-in ones (see :mod:`politerm.redact`)."""

    patterns: list[str] = Field(default_factory=list, description="a list of regular expressions")

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                msg = f"{pattern!r}: {exc}"
                raise ValueError(msg) from None
        return value


NOTIFY_EVENTS = ("approval", "question", "gate", "done", "failed", "stuck", "limited")


class NotifyConfig(_Section):
    """Where notifications go (approval needed, question, gate, task done or failed, STUCK)."""

    desktop: bool = Field(default=True, description="true or false")
    webhook: str | None = Field(
        default=None, pattern=r"^https?://\S+$", description="an http(s) URL"
    )
    ntfy: list[t.Annotated[str, Field(pattern=r"^https?://\S+/[^/\s]+$")]] = Field(
        default_factory=list,
        description="a list of topic URLs, e.g. ['https://ntfy.sh/my-topic']",
    )
    min_interval: float = Field(
        default=30.0, ge=0, allow_inf_nan=False, description="a number of seconds >= 0"
    )
    burst: int = Field(default=5, ge=1, description="a whole number >= 1")
    events: list[str] = Field(
        default_factory=lambda: [
            "approval",
            "question",
            "gate",
            "done",
            "failed",
            "stuck",
            "limited",
        ],
        description="a list of event names",
    )


class Config(_Section):
    """The whole configuration; build it with :func:`load_config`."""

    tmux: TmuxConfig = Field(default_factory=TmuxConfig, description="a table")
    store: StoreConfig = Field(default_factory=StoreConfig, description="a table")
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig, description="a table")
    routing: RoutingConfig = Field(default_factory=RoutingConfig, description="a table")
    agents: dict[str, AgentConfig] = Field(
        default_factory=dict, description="a table of agent tables"
    )
    templates: dict[str, Path] = Field(
        default_factory=dict, description="a table of template name = file path"
    )
    epic: EpicConfig = Field(default_factory=EpicConfig, description="a table")
    redact: RedactConfig = Field(default_factory=RedactConfig, description="a table")
    notify: NotifyConfig = Field(default_factory=NotifyConfig, description="a table")

    _sources: list[Path] = PrivateAttr(default_factory=list)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, value: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in value:
            if not _AGENT_NAME_RE.match(name):
                msg = f"agent name {name!r} must be letters, digits, '_' or '-'"
                raise ValueError(msg)
        return value

    @property
    def sources(self) -> tuple[Path, ...]:
        """The configuration files that were read, in the order they were applied."""
        return tuple(self._sources)

    def agent(self, name: str) -> AgentConfig:
        """Return the agent called ``name``.

        Raises
        ------
        ConfigError
            When no such agent is configured.
        """
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(self.agents) or "none"
            msg = f"no agent named {name!r}{did_you_mean(name, self.agents)}; configured: {known}"
            raise ConfigError(msg) from None


# --- helpers ----------------------------------------------------------------------------


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Return a `` (did you mean 'x'?)`` hint for a misspelt ``word``, or ``""``.

    Examples
    --------
    >>> did_you_mean("tiemouts", ["tmux", "timeouts", "routing"])
    " (did you mean 'timeouts'?)"
    >>> did_you_mean("colour", ["tmux", "store"])
    ''
    """
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def guess_profile(argv: list[str]) -> str:
    """Guess an agent profile from a command's program name.

    Examples
    --------
    >>> guess_profile(["/usr/local/bin/claude", "--continue"])
    'claude'
    >>> guess_profile(["vim"])
    'generic'
    """
    program = Path(argv[0]).name.lower() if argv else ""
    program = program.removesuffix(".exe")
    return program if program in KNOWN_PROFILES else "generic"


def parse_seconds(name: str, value: str) -> float:
    """Parse a number of seconds > 0 from an environment variable.

    Raises
    ------
    ConfigError
        Naming the variable, when ``value`` is not a finite positive number.

    Examples
    --------
    >>> parse_seconds("POLI_PLAN_TIMEOUT", "90")
    90.0
    >>> parse_seconds("POLI_PLAN_TIMEOUT", "x")
    Traceback (most recent call last):
    ...
    politerm.errors.ConfigError: POLI_PLAN_TIMEOUT: expected a number of seconds > 0, got 'x'
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        msg = f"{name}: expected {_SECONDS}, got {value!r}"
        raise ConfigError(msg)
    return seconds


def user_config_file() -> Path:
    """Return the path of the user configuration file (it need not exist)."""
    return platformdirs.user_config_path("politerm") / CONFIG_FILENAME


def default_store_path() -> Path:
    """Return the default run store: ``runs.sqlite3`` under the user state directory."""
    return platformdirs.user_state_path("politerm") / "runs.sqlite3"


def _scenario(name: str) -> str:
    # Computed, not imported: the fake agent package may be absent in a trimmed install.
    return str(Path(__file__).parent / "testing" / "fakeagent" / "scenarios" / name)


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
)
"""Environment variables that override the files."""


# --- validation errors ------------------------------------------------------------------


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
            current = info.annotation
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
    got = repr(str(value) if isinstance(value, Path) else value) if found else "nothing"
    reason = ""
    if kind == "value_error":
        reason = f" ({error.get('ctx', {}).get('error', error['msg'])!s})"
    if expected is None:
        return ConfigError(f"{where}: {error['msg']}, got {got}")
    return ConfigError(f"{where}: expected {expected}, got {got}{reason}")


# --- loading ----------------------------------------------------------------------------


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
        Where to look for ``poli.toml`` and the default working directory of agents;
        ``None`` is the current directory.
    config_path
        Read this file instead of ``<project_dir>/poli.toml``; it must exist.
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
    project = (project_dir or Path.cwd()).absolute()
    env = os.environ if env is None else env
    layers = _Layers()
    sources: list[Path] = []

    user_file = user_config_file()
    if user_file.is_file():
        layers.apply(_read_toml(user_file), _display(user_file))
        sources.append(user_file)
    project_file = (config_path or project / CONFIG_FILENAME).absolute()
    if config_path is not None or project_file.is_file():
        layers.apply(_read_toml(project_file), _display(project_file))
        sources.append(project_file)
    for name, layer in _env_layer(env, Path.cwd()):
        layers.apply(layer, name)

    data = layers.data
    agents = data.setdefault("agents", {})
    if isinstance(agents, dict):
        for name in agents:
            if not _AGENT_NAME_RE.match(name):
                where = layers.source_of(("agents", name))
                msg = f"{where}: agents: expected names of letters, digits, _ or -, got {name!r}"
                raise ConfigError(msg)
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
    return config
