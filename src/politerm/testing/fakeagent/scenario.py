"""The scenario a fake agent plays: how it looks, which quirks it has, what it replies.

A scenario is a TOML (or JSON) file validated by :class:`Scenario`; see the package
docstring of :mod:`politerm.testing.fakeagent` for the full format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import pathlib
import re
import typing as t

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


# The scenario is checked by :func:`_build` below, not by pydantic: every fake agent
# imports this module at start, and importing pydantic and building its models cost
# about 0.1 s of CPU per agent (50 s at 500 agents). A field's ``metadata`` holds its
# bounds (``ge``, ``gt``, ``le``, ``min_length``) and, for ``match``, a check.
def _bounds(default: t.Any, **bounds: t.Any) -> t.Any:
    """A field with a default and bounds that :func:`_build` enforces."""
    return dataclasses.field(default=default, metadata=bounds)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        msg = f"bad regex: {exc}"
        raise ValueError(msg) from exc
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteFile:
    """A file the agent writes when a rule fires (after approval, if any)."""

    path: str
    content: str = ""
    # Appending lets notes build up over several turns (a pipeline's .handoff.md).
    append: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rule:
    """One prompt → behaviour rule; the first rule whose regex matches wins."""

    match: str = _bounds(r"(?s).*", check=_regex)
    reply: str = ""
    think_time: float | None = _bounds(None, ge=0)
    approval: str | None = None
    # Print the reply first, then ask (aider asks "Run shell command?" after its answer).
    approval_after_reply: bool = False
    deny_reply: str | None = None
    write_file: WriteFile | None = None
    action: Action = Action.REPLY
    status_lines: list[str] | None = None
    defaults: dict[str, str] = dataclasses.field(default_factory=dict)
    # Fill the placeholders this match lacks from earlier prompts' groups (a "continue"
    # sent after a usage limit answers the task the first prompt named).
    recall: bool = False

    def search(self, prompt: str) -> re.Match[str] | None:
        """Match this rule's regex anywhere in ``prompt``."""
        return re.search(self.match, prompt)


def _share() -> t.Any:
    """A probability field, 0 (never) by default."""
    return _bounds(0.0, ge=0, le=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Faults:
    """Seeded fault knobs (the ``[faults]`` table); every decision is logged as ``fault``.

    Decisions are drawn from a generator seeded with ``seed``, the agent's name and how
    often it has started before (from its log), so a run is repeatable and a restarted
    agent does not replay its previous life's faults.
    """

    seed: int = 0
    lose_enter: float = _share()  # share of submitting Enter presses that are lost
    crash_at: CrashAt = CrashAt.AFTER_SUBMIT
    crash_share: float = _share()  # share of prompts on which the agent crashes
    crash_after: int = _bounds(0, ge=0)  # prompts let through first (log-wide)
    crash_max: int = _bounds(1, ge=0)  # crashes over the log's whole life
    freeze_share: float = _share()  # share of turns during which the agent stops reading input
    freeze_seconds: float = _bounds(1.0, gt=0, le=600)
    slow_share: float = _share()  # share of turns that think longer
    slow_seconds: float = _bounds(1.0, ge=0, le=600)
    leave_text_share: float = _share()  # share of finished turns that leave text in the box
    leave_text: str = _bounds("draft: half-typed note", min_length=1)
    lose_answers: int = _bounds(0, ge=0)  # first answers to its questions lost (log-wide)


def _sleep_child() -> list[str]:
    return ["sleep", "600"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    """A whole scenario file."""

    mode: Mode | None = None
    think_time: float = _bounds(0.3, ge=0)
    trust_dialog: bool = False
    swallow_first_enter_after_paste: bool = False
    swallow_enter_in_burst: bool = False
    burst_window: float = _bounds(0.0, ge=0, le=10)
    swallow_all_enters: bool = False
    list_reindent: bool = False
    strip_fences: bool | None = None
    ignore_sighup: bool = False
    spawn_child: bool = False
    child_command: list[str] = dataclasses.field(default_factory=_sleep_child)
    status_lines: list[str] = dataclasses.field(default_factory=list)
    default_reply: str = "ECHO: {first_line}"
    rules: list[Rule] = dataclasses.field(default_factory=list)
    faults: Faults = dataclasses.field(default_factory=Faults)

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
        data = json.loads(raw) if kind == "json" else _toml(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        msg = f"{path}: not valid {kind}: {exc}"
        raise ScenarioError(msg) from exc
    if not isinstance(data, dict):
        msg = f"{path}: top level must be a table"
        raise ScenarioError(msg)
    problems: list[tuple[str, str]] = []
    scenario = _build(Scenario, data, (), problems)
    if problems:
        key, message = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        msg = f"{path}: key {key!r}: {message}{more}"
        raise ScenarioError(msg)
    return t.cast("Scenario", scenario)


def _toml(text: str) -> t.Any:
    import tomllib  # only scenarios in TOML need it

    return tomllib.loads(text)


_Problems = list[tuple[str, str]]
_NUMBER = {float: "a valid number", int: "a valid integer", str: "a valid string"}
_BOUND_TEXT = {
    "ge": "greater than or equal to",
    "gt": "greater than",
    "le": "less than or equal to",
}


def _build(cls: type, data: t.Any, loc: tuple[str, ...], problems: _Problems) -> t.Any:
    """``cls`` (a scenario dataclass) from ``data``; each problem goes to ``problems``.

    Types are checked as a TOML or JSON file gives them: an integer counts as a number,
    a boolean does not; nothing else is converted. Messages read as pydantic's did.

    Examples
    --------
    >>> found: _Problems = []
    >>> _build(Faults, {"seed": 3, "lose_enter": 1}, (), found).lose_enter, found
    (1.0, [])
    >>> _ = _build(Rule, {"think_time": -1, "match": "(", "x": 1}, ("rules", "0"), found)
    >>> found  # doctest: +NORMALIZE_WHITESPACE
    [('rules.0.match', 'Value error, bad regex: missing ), unterminated subpattern at
      position 0'), ('rules.0.think_time', 'Input should be greater than or equal to 0'),
     ('rules.0.x', 'Extra inputs are not permitted')]
    """
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        problems.append(
            (_key(loc), f"Input should be a valid dictionary or instance of {cls.__name__}")
        )
        return None
    hints = _hints(cls)
    values: dict[str, t.Any] = {}
    for field in dataclasses.fields(cls):
        here = (*loc, field.name)
        if field.name not in data:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                problems.append((_key(here), "Field required"))
            continue
        before = len(problems)
        value = _value(hints[field.name], data[field.name], here, problems)
        if len(problems) == before and value is not None:
            _check(field.metadata, value, here, problems)
        values[field.name] = value
    for extra in data:
        if extra not in hints:
            problems.append((_key((*loc, str(extra))), "Extra inputs are not permitted"))
    return None if problems else cls(**values)


def _value(hint: t.Any, value: t.Any, loc: tuple[str, ...], problems: _Problems) -> t.Any:
    """``value`` as type ``hint`` wants it, or a problem."""
    args = t.get_args(hint)
    if type(None) in args:  # an optional field: None, or the other type
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
        args = t.get_args(hint)
    origin = t.get_origin(hint)
    if origin is list:
        if not isinstance(value, list):
            problems.append((_key(loc), "Input should be a valid list"))
            return None
        return [_value(args[0], v, (*loc, str(i)), problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            problems.append((_key(loc), "Input should be a valid dictionary"))
            return None
        return {k: _value(args[1], v, (*loc, str(k)), problems) for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return _build(t.cast("type", hint), value, loc, problems)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            names = [repr(m.value) for m in hint]
            choices = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" or {names[-1]}"
            problems.append((_key(loc), f"Input should be {choices}"))
            return None
    if hint is bool:
        return _lax_bool(value, loc, problems)
    why = ""
    if hint is not str and isinstance(value, str):  # pydantic's lax mode took "1.5" too
        why = ", unable to parse string as " + ("a number" if hint is float else "an integer")
        with contextlib.suppress(ValueError):
            value = _number(value, hint)
    if hint is not str and isinstance(value, bool):  # and true as 1
        value = int(value)
    if not isinstance(value, (int, float, str)):
        value = None
    if hint is float and isinstance(value, (int, float)):
        return float(value)
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if hint is int and isinstance(value, float):
        problems.append(
            (_key(loc), "Input should be a valid integer, got a number with a fractional part")
        )
        return None
    if hint is int and isinstance(value, int):
        return value
    if hint is str and isinstance(value, str):
        return value
    problems.append((_key(loc), f"Input should be {_NUMBER[hint]}{why}"))
    return None


def _number(text: str, hint: type) -> float | int:
    """``text`` as a number of type ``hint`` (``"2.0"`` is the integer 2); ValueError if not."""
    number = float(text.strip())
    if hint is int and not number.is_integer():
        raise ValueError(text)
    return number if hint is float else int(number)


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _lax_bool(value: t.Any, loc: tuple[str, ...], problems: _Problems) -> bool | None:
    """A boolean, or 0/1 or a word for one (``"yes"``, ``"off"``) as pydantic took them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    elif isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    why = ", unable to interpret input" if isinstance(value, (str, int, float)) else ""
    problems.append((_key(loc), f"Input should be a valid boolean{why}"))
    return None


def _check(
    bounds: t.Mapping[str, t.Any], value: t.Any, loc: tuple[str, ...], problems: _Problems
) -> None:
    """The field's bounds and check (its ``metadata``) on a value of the right type."""
    for name, limit in bounds.items():
        if name == "check":
            try:
                limit(value)
            except ValueError as exc:
                problems.append((_key(loc), f"Value error, {exc}"))
        elif name == "min_length":
            if len(value) < limit:
                problems.append((_key(loc), f"String should have at least {limit} character"))
        else:
            fails = {"ge": value < limit, "gt": value <= limit, "le": value > limit}[name]
            if fails:
                problems.append((_key(loc), f"Input should be {_BOUND_TEXT[name]} {limit}"))


_HINTS: dict[type, dict[str, t.Any]] = {}


def _hints(cls: type) -> dict[str, t.Any]:
    """``cls``'s field types, evaluated once (this module's annotations are strings)."""
    if cls not in _HINTS:
        _HINTS[cls] = t.get_type_hints(cls)
    return _HINTS[cls]


def _key(loc: tuple[str, ...]) -> str:
    return ".".join(loc) or "<top>"
