r"""Parse and validate ``.pipeline`` files, reporting every problem at once.

The format is line based::

    name: feature
    description: Full feature development flow
    timeout_min: 60

    # NUM | AGENT | CLI | GATE | PARALLEL_GROUP | TIMEOUT_MIN | PROMPT
    1 | product-manager | claude | auto | - | 30 | Create PRD from task in .handoff.md
    2 | architect       | claude | gate | - | -  | Design architecture from the PRD
    @include review.steps

* Header lines ``key: value`` (``name`` and ``timeout_min`` are required, ``description``
  is optional).
* Step rows have seven ``|``-separated columns; ``-`` in CLI, PARALLEL_GROUP or TIMEOUT_MIN
  means the default; a literal pipe in PROMPT is written ``\|``.
* ``@include path.steps`` splices a step module (rows only, no header) in place, relative to
  the including file; its step numbers are counted from the last step before the include.
  A module may number its rows as META's modules do: ``N`` is its first step, ``N+1`` the
  next, and so on.
* CLI ``interactive`` marks a human-driven step: the agent is opened with the prompt and the
  run waits until a person marks the step done. ``claude-interactive`` (any ``<cli>-``) is
  such a step on that CLI, as in META.
* ``#`` comments and blank lines anywhere.

Every problem becomes a :class:`~politerm.errors.PipelineSyntaxError` (``file:line:
message``); :func:`load_pipeline` raises :class:`~politerm.errors.PipelineInvalid` holding
all of them.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
import typing as t

from politerm.errors import PipelineInvalid, PipelineSyntaxError
from politerm.pipeline.model import Gate, Pipeline, Step

if t.TYPE_CHECKING:
    from collections.abc import Callable, Collection

COLUMNS = ("NUM", "AGENT", "CLI", "GATE", "PARALLEL_GROUP", "TIMEOUT_MIN", "PROMPT")
HEADERS = ("name", "description", "timeout_min")
REQUIRED_HEADERS = ("name", "timeout_min")
_HEADER = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*(?P<value>.*)$")
_INCLUDE = re.compile(r"^@include\s+(?P<path>\S.*)$")
_SPLIT = re.compile(r"(?<!\\)\|")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_MAX_INCLUDE_DEPTH = 8
_RELATIVE = re.compile(r"^N(?:\s*\+\s*(?P<k>\d+))?$")
#: The CLI value of a human-driven step (META's ``interactive``).
INTERACTIVE = "interactive"
_ON_CLI = f"-{INTERACTIVE}"


def interactive_cli(value: str | None) -> tuple[bool, str | None]:
    """Whether a CLI column is a human-driven step, and the CLI it names (if any).

    Examples
    --------
    >>> interactive_cli("interactive"), interactive_cli("codex-interactive")
    ((True, None), (True, 'codex'))
    >>> interactive_cli("codex"), interactive_cli(None)
    ((False, 'codex'), (False, None))
    """
    if value == INTERACTIVE:
        return True, None
    if value is not None and value.endswith(_ON_CLI) and len(value) > len(_ON_CLI):
        return True, value.removesuffix(_ON_CLI)
    return False, value


def split_columns(line: str) -> list[str]:
    r"""Split a step row on unescaped pipes, strip each column and unescape ``\|``.

    Examples
    --------
    >>> split_columns(r"1 | dev | - | auto | - | - | grep a \| wc -l")
    ['1', 'dev', '-', 'auto', '-', '-', 'grep a | wc -l']
    >>> len(split_columns("1 | a | b"))
    3
    """
    return [col.strip().replace("\\|", "|") for col in _SPLIT.split(line)]


@dataclasses.dataclass
class _Context:
    known_clis: Collection[str] | None
    agent_exists: Callable[[str], bool] | None
    agent_where: str = ""
    problems: list[PipelineSyntaxError] = dataclasses.field(default_factory=list)
    headers: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)
    row_lines: int = 0
    include_failed: bool = False

    def problem(self, path: str, line: int, message: str) -> None:
        self.problems.append(PipelineSyntaxError(path, line, message))


def _suggest(word: str, options: Collection[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(raw: str, offset: int, *, module: bool) -> int | None:
    """A row's step number: ``K`` counted from ``offset``, or in a module ``N``/``N+K``.

    Examples
    --------
    >>> _number("2", 4, module=True), _number("N", 4, module=True), _number("N+2", 4, module=True)
    (6, 5, 7)
    >>> _number("N+1", 0, module=False) is None
    True
    """
    if raw.isdigit() and int(raw) >= 1:
        return offset + int(raw)
    rel = _RELATIVE.match(raw)
    if module and rel:
        return offset + 1 + int(rel["k"] or 0)
    return None


def _row(
    cols: list[str], path: str, lineno: int, offset: int, ctx: _Context, *, module: bool
) -> tuple[int | None, Step | None]:
    """Validate one row's columns; the number (if readable) and the step (if valid)."""
    ok = True
    raw_num, agent, cli, gate, group, timeout, prompt = cols
    num = _number(raw_num, offset, module=module)
    if num is None:
        extra = " (N, N+1 … only in an @include'd module)" if _RELATIVE.match(raw_num) else ""
        ctx.problem(
            path, lineno, f"step number must be a whole number >= 1, got {raw_num!r}{extra}"
        )
        ok = False
    if not _NAME.match(agent):
        ctx.problem(path, lineno, f"bad agent name {agent!r}")
        ok = False
    elif ctx.agent_exists is not None and not ctx.agent_exists(agent):
        where = f" (looked in {ctx.agent_where})" if ctx.agent_where else ""
        ctx.problem(path, lineno, f"missing agent definition {agent}.md for agent {agent!r}{where}")
        ok = False
    cli_value: str | None = None if cli == "-" else cli
    named = interactive_cli(cli_value)[1]
    if named is not None and ctx.known_clis is not None and named not in ctx.known_clis:
        known = ", ".join(sorted(ctx.known_clis))
        hint = _suggest(named, ctx.known_clis)
        ctx.problem(path, lineno, f"unknown CLI {cli!r}{hint}; known: {known}")
        ok = False
    try:
        gate_value = Gate(gate)
    except ValueError:
        ctx.problem(path, lineno, f"unknown gate {gate!r} (expected auto or gate)")
        gate_value = Gate.AUTO
        ok = False
    group_value: str | None = None if group == "-" else group
    if group_value is not None and not _NAME.match(group_value):
        ctx.problem(path, lineno, f"bad parallel group name {group!r}")
        ok = False
    minutes: float | None = None
    if timeout != "-":
        try:
            minutes = float(timeout)
        except ValueError:
            minutes = None
        if minutes is None or not math.isfinite(minutes) or minutes <= 0:
            ctx.problem(
                path, lineno, f"timeout must be a number of minutes > 0 or -, got {timeout!r}"
            )
            minutes = None
            ok = False
    if not prompt:
        ctx.problem(path, lineno, "empty prompt")
        ok = False
    if not ok or num is None:
        return num, None
    step = Step(num, agent, cli_value, gate_value, group_value, minutes, prompt, path, lineno)
    return num, step


def _scan(
    text: str,
    path: str,
    base: pathlib.Path | None,
    ctx: _Context,
    *,
    offset: int,
    stack: tuple[str, ...],
    module: bool,
) -> list[tuple[int | None, Step | None, str, int]]:
    """The rows of one file (includes spliced in) as ``(num, step, path, line)``."""
    rows: list[tuple[int | None, Step | None, str, int]] = []
    last = offset
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        inc = _INCLUDE.match(line)
        if inc:
            rows.extend(_include(inc.group("path").strip(), path, lineno, base, ctx, last, stack))
            last = max([last, *(n for n, _, _, _ in rows if n is not None)])
            continue
        if _SPLIT.search(line):
            ctx.row_lines += 1
            cols = split_columns(line)
            if len(cols) != len(COLUMNS):
                ctx.problem(
                    path,
                    lineno,
                    f"expected {len(COLUMNS)} columns ({' | '.join(COLUMNS)}), got {len(cols)}"
                    + (r"; write literal pipes in PROMPT as \|" if len(cols) > 7 else ""),
                )
                continue
            num, step = _row(cols, path, lineno, offset, ctx, module=module)
            rows.append((num, step, path, lineno))
            if num is not None:
                last = max(last, num)
            continue
        head = _HEADER.match(line)
        if head:
            key, value = head.group("key"), head.group("value").strip()
            if module:
                ctx.problem(path, lineno, f"header {key!r} in a step module (.steps has rows only)")
            elif key not in HEADERS:
                ctx.problem(path, lineno, f"unknown header {key!r} (expected {', '.join(HEADERS)})")
            elif key in ctx.headers:
                ctx.problem(path, lineno, f"header {key!r} given twice")
            else:
                ctx.headers[key] = (value, lineno)
            continue
        ctx.problem(path, lineno, "not a step row, a 'key: value' header or an @include line")
    return rows


def _include(
    target: str,
    path: str,
    lineno: int,
    base: pathlib.Path | None,
    ctx: _Context,
    offset: int,
    stack: tuple[str, ...],
) -> list[tuple[int | None, Step | None, str, int]]:
    if base is None:
        ctx.problem(path, lineno, f"@include {target}: includes need a file on disk")
        return []
    inc = (base / target).resolve()
    if str(inc) in stack:
        ctx.problem(path, lineno, f"@include {target}: include cycle")
        ctx.include_failed = True
        return []
    if len(stack) > _MAX_INCLUDE_DEPTH:
        ctx.problem(path, lineno, f"@include {target}: includes nested too deep")
        return []
    try:
        text = inc.read_text(encoding="utf-8")
    except OSError as exc:
        ctx.problem(path, lineno, f"@include {target}: cannot read {inc}: {exc.strerror}")
        ctx.include_failed = True
        return []
    except UnicodeDecodeError as exc:
        ctx.problem(path, lineno, f"@include {target}: {inc} is not UTF-8 text ({exc.reason})")
        ctx.include_failed = True
        return []
    return _scan(
        text, str(inc), inc.parent, ctx, offset=offset, stack=(*stack, str(inc)), module=True
    )


def _check_numbers(rows: list[tuple[int | None, Step | None, str, int]], ctx: _Context) -> None:
    seen: dict[int, tuple[str, int]] = {}
    for num, _, path, line in rows:
        if num is None:
            continue
        if num in seen:
            first = seen[num]
            ctx.problem(path, line, f"duplicate step number {num} (also at {first[0]}:{first[1]})")
        else:
            seen[num] = (path, line)
    if not seen:
        return
    for k in range(1, max(seen) + 1):
        if k not in seen:
            after = min(n for n in seen if n > k)
            path, line = seen[after]
            ctx.problem(path, line, f"missing step number {k} (steps go 1, 2, 3, ...)")


def _check_groups(steps: list[Step], ctx: _Context) -> None:
    closed: set[str] = set()
    current: str | None = None
    for step in steps:
        if step.group != current and current is not None:
            closed.add(current)
        if step.group is not None and step.group in closed and step.group != current:
            ctx.problem(
                step.source,
                step.line,
                f"parallel group {step.group!r} is not adjacent: its steps must follow each other",
            )
        current = step.group


def parse_pipeline(
    text: str,
    path: str | pathlib.Path = "<string>",
    *,
    known_clis: Collection[str] | None = None,
    agent_exists: Callable[[str], bool] | None = None,
    agent_where: str = "",
) -> tuple[Pipeline | None, list[PipelineSyntaxError]]:
    r"""Parse pipeline ``text``; return the pipeline (None if invalid) and every problem.

    Parameters
    ----------
    text
        The file's contents.
    path
        Its path: named in problems, and the base of ``@include``.
    known_clis
        Accepted CLI names; None accepts any.
    agent_exists
        Tells whether an agent definition exists; None accepts any.
    agent_where
        Where agent definitions were looked for (named when one is missing).

    Examples
    --------
    >>> text = '''name: demo
    ... timeout_min: 10
    ... 1 | dev | - | auto | - | - | say a \\| b
    ... 2 | dev | - | gate | - | 0.5 | check'''
    >>> pipe, problems = parse_pipeline(text, "demo.pipeline")
    >>> [(s.num, s.gate.value, s.timeout_min, s.prompt) for s in pipe.steps]
    [(1, 'auto', None, 'say a | b'), (2, 'gate', 0.5, 'check')]
    >>> _, problems = parse_pipeline("name: x\n1 | dev | - | maybe | - | - | go", "x.pipeline")
    >>> for p in problems:
    ...     print(p)
    x.pipeline:1: missing header: timeout_min
    x.pipeline:2: unknown gate 'maybe' (expected auto or gate)
    """
    where = str(path)
    p = pathlib.Path(path) if where != "<string>" else None
    ctx = _Context(known_clis, agent_exists, agent_where)
    stack = (str(p.resolve()),) if p is not None else ()
    base = p.resolve().parent if p is not None else None
    rows = _scan(text, where, base, ctx, offset=0, stack=stack, module=False)
    _check_numbers(rows, ctx)
    steps = sorted((s for _, s, _, _ in rows if s is not None), key=lambda s: s.num)
    _check_groups(steps, ctx)
    for key in REQUIRED_HEADERS:
        if key not in ctx.headers:
            ctx.problem(where, 1, f"missing header: {key}")
    if not ctx.row_lines and not ctx.include_failed:
        # With a failed include, that failure is the news, not the steps it would have held.
        ctx.problem(where, 1, "no steps")
    timeout = math.nan
    if "timeout_min" in ctx.headers:
        value, line = ctx.headers["timeout_min"]
        try:
            timeout = float(value)
        except ValueError:
            timeout = math.nan
        if not math.isfinite(timeout) or timeout <= 0:
            ctx.problem(where, line, f"timeout_min must be a number of minutes > 0, got {value!r}")
    if "name" in ctx.headers and not _NAME.match(ctx.headers["name"][0]):
        value, line = ctx.headers["name"]
        ctx.problem(where, line, f"bad pipeline name {value!r}")
    if ctx.problems:
        # File order: the including file first, then each included file, line by line.
        order = {where: 0}
        for prob in ctx.problems:
            order.setdefault(prob.path, len(order))
        return None, sorted(ctx.problems, key=lambda e: (order[e.path], e.line))
    pipe = Pipeline(
        name=ctx.headers["name"][0],
        description=ctx.headers.get("description", ("", 0))[0],
        timeout_min=timeout,
        steps=tuple(steps),
        path=p.resolve() if p is not None else None,
    )
    return pipe, []


def known_clis() -> set[str]:
    """CLI names a pipeline may use: every agent profile (``fake`` included)."""
    from politerm.agents.profile import list_profiles

    return set(list_profiles())


def load_pipeline(
    path: str | pathlib.Path,
    project: pathlib.Path | None = None,
    *,
    agents: t.Sequence[pathlib.Path] = (),
) -> Pipeline:
    """Read, parse and validate a pipeline file against the agents visible from ``project``.

    ``agents`` are directories searched first (``--agents DIR``).

    Raises
    ------
    PipelineInvalid
        Holding every problem found.
    """
    from politerm.pipeline.agents import AgentSearch

    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PipelineInvalid(
            [PipelineSyntaxError(path, 0, f"cannot read: {exc.strerror}")]
        ) from None
    except UnicodeDecodeError as exc:
        why = f"not a text file: byte {exc.start} is not UTF-8 ({exc.reason})"
        raise PipelineInvalid([PipelineSyntaxError(path, 0, why)]) from None
    search = AgentSearch.for_run(project, pipeline=path, extra=agents)
    pipe, problems = parse_pipeline(
        text,
        path,
        known_clis=known_clis(),
        agent_exists=lambda name: search.find(name) is not None,
        agent_where=search.where(),
    )
    if pipe is None:
        raise PipelineInvalid(problems)
    return pipe


def validate_file(
    path: str | pathlib.Path,
    project: pathlib.Path | None = None,
    *,
    agents: t.Sequence[pathlib.Path] = (),
) -> list[str]:
    """Every problem of one file as ``file:line: message`` lines (empty when valid)."""
    try:
        load_pipeline(path, project, agents=agents)
    except PipelineInvalid as exc:
        return [str(p) for p in exc.problems]
    return []
