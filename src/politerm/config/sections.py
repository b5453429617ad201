"""The configuration's sections: pydantic models with what each key expects, and helpers.

Build a :class:`Config` with :func:`politerm.config.load_config`.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
import typing as t
from pathlib import Path

import platformdirs
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from politerm.agents.profile import guess_profile
from politerm.config.fleet import NAME_PATTERN, FleetConfig
from politerm.config.manager import ManagerConfig
from politerm.errors import ConfigError
from politerm.project import Project, find_project

if t.TYPE_CHECKING:
    from collections.abc import Iterable

CONFIG_FILENAME = "poli.toml"
"""Name of the user and project configuration files."""

DEFAULT_AGENTS: tuple[str, ...] = ("PLANNER", "EXECUTER")
"""Agents that always exist, whatever the files say."""

"""Program names that pick their own agent profile; anything else gets ``"generic"``."""

_SECONDS = "a number of seconds > 0"
_AGENT_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _compiled(value: list[str]) -> list[str]:
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            msg = f"{pattern!r}: {exc}"
            raise ValueError(msg) from None
    return value


Regexes = t.Annotated[list[str], AfterValidator(_compiled)]
"""A list of regular expressions, each checked to compile."""


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
    width: int = Field(
        default=200, ge=20, le=10000, description="a whole number of columns from 20 to 10000"
    )
    height: int = Field(
        default=50, ge=5, le=10000, description="a whole number of rows from 5 to 10000"
    )
    history_limit: int = Field(default=200_000, ge=0, description="a whole number of lines >= 0")
    shard_size: int = Field(
        default=50,
        ge=1,
        description="a whole number of agents >= 1 (agents per tmux server of a session)",
    )


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
    contract: t.Literal["politerm", "poliseed"] = Field(
        default="politerm",
        description="'politerm', or 'poliseed' for the original PoliTerm's prompts and blocks",
    )
    approval: t.Literal["ask", "approve", "deny"] = Field(
        default="ask", description="one of 'ask', 'approve', 'deny'"
    )
    approval_patterns: Regexes = Field(
        default_factory=list, description="a list of regular expressions"
    )


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
    hooks: bool = Field(
        default=True, description="true or false (install politerm's receipt hooks in the agent)"
    )
    node: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="the fleet node this agent runs on ([fleet]; letters, digits, '_', '.', '-')",
    )
    nodes: list[t.Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(
        default=None,
        min_length=1,
        description="a non-empty list of fleet node names that may host this agent (a pool)",
    )

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

    @field_validator("nodes")
    @classmethod
    def _one_placement(cls, value: list[str] | None, info: t.Any) -> list[str] | None:
        if value is not None and info.data.get("node") is not None:
            msg = "give either node or nodes, not both"
            raise ValueError(msg)
        return value

    def model_post_init(self, context: t.Any, /) -> None:
        """Fill in the guessed profile."""
        if self.profile is None:
            self.profile = guess_profile(self.argv())

    def hosts(self) -> tuple[str, ...] | None:
        """The fleet nodes that may run this agent (``node`` or ``nodes``); None: any node.

        Examples
        --------
        >>> AgentConfig(command="x", nodes=["a", "b", "a"]).hosts()
        ('a', 'b')
        >>> AgentConfig(command="x", node="b").hosts(), AgentConfig(command="x").hosts()
        (('b',), None)
        """
        if self.node is not None:
            return (self.node,)
        return tuple(dict.fromkeys(self.nodes)) if self.nodes is not None else None

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
    width: int = Field(
        default=200, ge=20, le=10000, description="a whole number of columns from 20 to 10000"
    )
    height: int = Field(
        default=50, ge=5, le=10000, description="a whole number of rows from 5 to 10000"
    )
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


class PipelineConfig(_Section):
    """``poli run``: where agent definitions are looked for, where handoff files go."""

    agents_path: list[str] = Field(
        default_factory=list, description="a list of directories (relative to the project)"
    )
    handoff_dir: str | None = Field(
        default=None,
        description="a directory relative to the project ('.meta' for META's handoff files)",
    )


class RedactConfig(_Section):
    """Extra secret patterns, redacted like the built-in ones (see :mod:`politerm.redact`)."""

    patterns: Regexes = Field(default_factory=list, description="a list of regular expressions")


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
    ntfy_token_env: str = Field(
        default="POLI_NTFY_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the name of an environment variable (its value: an ntfy access token)",
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


class LimitsConfig(_Section):
    """What an agent that hit a usage or rate limit (state LIMITED) does at the reset."""

    resume: str = Field(
        default="continue", min_length=1, description="the text sent when the limit resets"
    )
    wait: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        description=_SECONDS + " (used when the screen names no reset time)",
    )
    margin: float = Field(default=5.0, ge=0, allow_inf_nan=False, description="seconds >= 0")
    max_resumes: int = Field(default=5, ge=0, description="a whole number >= 0")


class BudgetConfig(_Section):
    """Token caps; a turn that goes over one is ended with a ``budget`` event."""

    turn_tokens: int | None = Field(default=None, gt=0, description="a whole number > 0")
    task_tokens: int | None = Field(default=None, gt=0, description="a whole number > 0")
    run_tokens: int | None = Field(default=None, gt=0, description="a whole number > 0")


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
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig, description="a table")
    redact: RedactConfig = Field(default_factory=RedactConfig, description="a table")
    notify: NotifyConfig = Field(default_factory=NotifyConfig, description="a table")
    manager: ManagerConfig = Field(default_factory=ManagerConfig, description="a table")
    limits: LimitsConfig = Field(default_factory=LimitsConfig, description="a table")
    budget: BudgetConfig = Field(default_factory=BudgetConfig, description="a table")
    fleet: FleetConfig | None = Field(
        default=None, description="a table (url, node, lease: see docs/fleet.md)"
    )

    _sources: list[Path] = PrivateAttr(default_factory=list)
    _project: Project | None = PrivateAttr(default=None)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, value: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in value:
            if not _AGENT_NAME_RE.match(name):
                msg = f"agent name {name!r} must be letters, digits, '_' or '-'"
                raise ValueError(msg)
        return value

    @property
    def project(self) -> Project:
        """The project this configuration was loaded for (found from here if built directly)."""
        if self._project is None:
            self._project = find_project()
        return self._project

    @property
    def sources(self) -> tuple[Path, ...]:
        """The configuration files that were read, in the order they were applied."""
        return tuple(self._sources)

    @property
    def project_file(self) -> Path | None:
        """The project's configuration file that was read (poli.toml or ``--config``)."""
        user = user_config_file()
        return next((p for p in reversed(self._sources) if p != user), None)

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
