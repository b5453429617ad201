"""The scenario a fake agent plays: how it looks, which quirks it has, what it replies.

A scenario is a TOML (or JSON) file validated by :class:`Scenario`; see the package
docstring of :mod:`politerm.testing.fakeagent` for the full format.
"""

from __future__ import annotations

import enum
import json
import pathlib
import re
import tomllib
import typing as t

import pydantic

from politerm.errors import ConfigError

SCENARIO_DIR = pathlib.Path(__file__).parent / "scenarios"


class Mode(str, enum.Enum):
    """Which real CLI the fake imitates."""

    CLAUDE = "claude"
    CODEX = "codex"
    GEMINI = "gemini"
    PLAIN = "plain"


class Action(str, enum.Enum):
    """What a rule does with the prompt it matched."""

    REPLY = "reply"
    CRASH = "crash"
    HANG = "hang"
    EXIT = "exit"


class CrashAt(str, enum.Enum):
    """The moment a ``[faults]`` crash strikes."""

    BEFORE_SUBMIT = "before_submit"  # Enter pressed on a prompt: die before submitting it
    AFTER_SUBMIT = "after_submit"  # prompt submitted (and logged): die before replying
    MID_REPLY = "mid_reply"  # half of the reply drawn: die before the rest


class ScenarioError(ConfigError):
    """A scenario file is missing, unparsable or fails validation."""


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class WriteFile(_Model):
    """A file the agent writes when a rule fires (after approval, if any)."""

    path: str
    content: str = ""
    # Appending lets notes build up over several turns (a pipeline's .handoff.md).
    append: bool = False


class Rule(_Model):
    """One prompt → behaviour rule; the first rule whose regex matches wins."""

    match: str = r"(?s).*"
    reply: str = ""
    think_time: float | None = pydantic.Field(default=None, ge=0)
    approval: str | None = None
    # Print the reply first, then ask (aider asks "Run shell command?" after its answer).
    approval_after_reply: bool = False
    deny_reply: str | None = None
    write_file: WriteFile | None = None
    action: Action = Action.REPLY
    status_lines: list[str] | None = None
    defaults: dict[str, str] = pydantic.Field(default_factory=dict)
    # Fill the placeholders this match lacks from earlier prompts' groups (a "continue"
    # sent after a usage limit answers the task the first prompt named).
    recall: bool = False

    @pydantic.field_validator("match")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            msg = f"bad regex: {exc}"
            raise ValueError(msg) from exc
        return value

    def search(self, prompt: str) -> re.Match[str] | None:
        """Match this rule's regex anywhere in ``prompt``."""
        return re.search(self.match, prompt)


def _share() -> t.Any:
    """A probability field, 0 (never) by default."""
    return pydantic.Field(default=0.0, ge=0, le=1)


class Faults(_Model):
    """Seeded fault knobs (the ``[faults]`` table); every decision is logged as ``fault``.

    Decisions are drawn from a generator seeded with ``seed``, the agent's name and how
    often it has started before (from its log), so a run is repeatable and a restarted
    agent does not replay its previous life's faults.
    """

    seed: int = 0
    lose_enter: float = _share()  # share of submitting Enter presses that are lost
    crash_at: CrashAt = CrashAt.AFTER_SUBMIT
    crash_share: float = _share()  # share of prompts on which the agent crashes
    crash_after: int = pydantic.Field(default=0, ge=0)  # prompts let through first (log-wide)
    crash_max: int = pydantic.Field(default=1, ge=0)  # crashes over the log's whole life
    freeze_share: float = _share()  # share of turns during which the agent stops reading input
    freeze_seconds: float = pydantic.Field(default=1.0, gt=0, le=600)
    slow_share: float = _share()  # share of turns that think longer
    slow_seconds: float = pydantic.Field(default=1.0, ge=0, le=600)
    leave_text_share: float = _share()  # share of finished turns that leave text in the box
    leave_text: str = pydantic.Field(default="draft: half-typed note", min_length=1)


class Scenario(_Model):
    """A whole scenario file."""

    mode: Mode | None = None
    think_time: float = pydantic.Field(default=0.3, ge=0)
    trust_dialog: bool = False
    swallow_first_enter_after_paste: bool = False
    swallow_enter_in_burst: bool = False
    burst_window: float = pydantic.Field(default=0.0, ge=0, le=10)
    swallow_all_enters: bool = False
    list_reindent: bool = False
    strip_fences: bool | None = None
    ignore_sighup: bool = False
    spawn_child: bool = False
    child_command: list[str] = pydantic.Field(default_factory=lambda: ["sleep", "600"])
    status_lines: list[str] = pydantic.Field(default_factory=list)
    default_reply: str = "ECHO: {first_line}"
    rules: list[Rule] = pydantic.Field(default_factory=list)
    faults: Faults = pydantic.Field(default_factory=Faults)

    def pick(
        self, prompt: str, memory: dict[str, str] | None = None
    ) -> tuple[int, Rule, dict[str, str]]:
        r"""Return ``(index, rule, groups)`` of the first matching rule.

        Index ``-1`` is the implicit default rule (``default_reply``). ``memory`` keeps
        every match's groups; a rule with ``recall`` starts from them.

        Examples
        --------
        >>> s = Scenario(rules=[Rule(match=r"id=(?P<id>\w+)", reply="got {id}"),
        ...                     Rule(match="^again$", recall=True)])
        >>> seen: dict[str, str] = {}
        >>> s.pick("x id=T7", seen)[0], s.pick("x id=T7", seen)[2]
        (0, {'id': 'T7'})
        >>> s.pick("again", seen)[2], s.pick("nothing")[0]
        ({'id': 'T7'}, -1)
        """
        for index, rule in enumerate(self.rules):
            m = rule.search(prompt)
            if m:
                groups = dict(memory or {}) if rule.recall else {}
                groups.update(rule.defaults)
                groups.update({k: v for k, v in m.groupdict().items() if v is not None})
                if memory is not None:
                    memory.update(groups)
                return index, rule, groups
        return -1, Rule(reply=self.default_reply), {}


def bundled_scenario(name: str) -> pathlib.Path:
    """Path of a scenario shipped with the package, e.g. ``bundled_scenario("echo")``.

    Examples
    --------
    >>> bundled_scenario("echo").name
    'echo.toml'
    """
    path = SCENARIO_DIR / (name if name.endswith((".toml", ".json")) else f"{name}.toml")
    if not path.is_file():
        msg = f"no bundled scenario {name!r} in {SCENARIO_DIR}"
        raise ScenarioError(msg)
    return path


def load_scenario(path: str | pathlib.Path) -> Scenario:
    """Read and validate a scenario file (TOML, or JSON when it ends in ``.json``).

    Raises
    ------
    ScenarioError
        One line naming the file and the offending key.
    """
    path = pathlib.Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        msg = f"{path}: cannot read scenario: {exc.strerror}"
        raise ScenarioError(msg) from exc
    kind = "json" if path.suffix == ".json" else "toml"
    try:
        data = json.loads(raw) if kind == "json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        msg = f"{path}: not valid {kind}: {exc}"
        raise ScenarioError(msg) from exc
    if not isinstance(data, dict):
        msg = f"{path}: top level must be a table"
        raise ScenarioError(msg)
    try:
        return Scenario.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "<top>"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        msg = f"{path}: key {key!r}: {first['msg']}{more}"
        raise ScenarioError(msg) from exc
