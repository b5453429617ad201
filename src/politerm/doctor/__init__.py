"""``poli doctor``: check that this machine can run politerm, and say how to fix what can't.

Each check is a function from a :class:`DoctorContext` to some :class:`CheckResult` rows;
:data:`CHECKS` lists them in the order they run and :func:`register_check` adds more (a
later check validates every pipeline). A check never raises for a problem it found: it
returns a ``FAIL`` row whose ``fix`` says what to do.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import os
import re
import shutil
import stat
import subprocess
import typing as t
from pathlib import Path

from politerm.config import ENV_VARS, Config, load_config, parse_seconds
from politerm.errors import ConfigError, PolitermError, TmuxNotFound
from politerm.tmux.binary import (
    INSTALL_HINT,
    MIN_TMUX_VERSION,
    find_tmux,
    format_version,
    run_bounded,
    tmux_version,
)

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from rich.table import Table

__all__ = [
    "CHECKS",
    "DEFAULT_TIMEOUT",
    "TIMEOUT_ENV",
    "Check",
    "CheckResult",
    "DoctorContext",
    "Status",
    "check_agents",
    "check_config",
    "check_epic_agent",
    "check_fleet",
    "check_pipeline_clis",
    "check_python_deps",
    "check_socket_dir",
    "check_tmux",
    "check_views",
    "doctor_timeout",
    "exit_code",
    "probe_version",
    "register_check",
    "render_table",
    "run_checks",
    "socket_dir",
    "version_satisfies",
]

DEFAULT_TIMEOUT = 5.0
"""Seconds a probe (``tmux -V``, ``<agent> --version``) may take."""

TIMEOUT_ENV = "POLI_DOCTOR_TIMEOUT"
"""Environment variable overriding :data:`DEFAULT_TIMEOUT`."""


class Status(enum.StrEnum):
    """Outcome of one check row."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One row of the doctor's report."""

    check: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        """Return the row as plain strings, the shape ``poli doctor --json`` prints."""
        return {
            "check": self.check,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclasses.dataclass
class DoctorContext:
    """What the checks look at: the environment and where the configuration lives.

    The configuration is loaded once, on first use, and shared by every check.
    """

    env: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))
    project_dir: Path | None = None
    config_path: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    _config: Config | None = dataclasses.field(default=None, init=False, repr=False)
    _config_error: ConfigError | None = dataclasses.field(default=None, init=False, repr=False)
    _loaded: bool = dataclasses.field(default=False, init=False, repr=False)

    @property
    def path(self) -> str:
        """The ``PATH`` programs are looked up on."""
        return self.env.get("PATH", os.defpath)

    def config(self) -> Config | None:
        """Return the loaded configuration, or ``None`` when it failed to load."""
        if not self._loaded:
            self._loaded = True
            try:
                self._config = load_config(
                    self.project_dir, config_path=self.config_path, env=self.env
                )
            except ConfigError as exc:
                self._config_error = exc
        return self._config

    @property
    def config_error(self) -> ConfigError | None:
        """Why the configuration failed to load, if it did."""
        self.config()
        return self._config_error


Check: t.TypeAlias = "Callable[[DoctorContext], Iterable[CheckResult]]"


# --- tmux -------------------------------------------------------------------------------


def check_tmux(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check that tmux is on ``PATH`` and at least :data:`MIN_TMUX_VERSION`."""
    try:
        binary = find_tmux(ctx.path)
        version = tmux_version(binary, timeout=ctx.timeout)
    except TmuxNotFound as exc:
        detail = str(exc).removesuffix(f"; {INSTALL_HINT}")
        return [CheckResult("tmux", Status.FAIL, detail, INSTALL_HINT)]
    shown = format_version(version)
    if version[:2] < MIN_TMUX_VERSION:
        wanted = ".".join(map(str, MIN_TMUX_VERSION))
        detail = f"tmux {shown} at {binary} is too old (need >= {wanted})"
        return [CheckResult("tmux", Status.FAIL, detail, INSTALL_HINT)]
    return [CheckResult("tmux", Status.OK, f"tmux {shown} at {binary}")]


def socket_dir(env: Mapping[str, str]) -> Path:
    """Return the directory tmux keeps our user's sockets in, as tmux itself computes it.

    Examples
    --------
    >>> str(socket_dir({"TMUX_TMPDIR": "/run/x"})).startswith("/run/x/tmux-")
    True
    """
    base = env.get("TMUX_TMPDIR") or "/tmp"  # tmux's own default, not ours
    return Path(base) / f"tmux-{os.getuid()}"


def check_socket_dir(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check the socket directory: ours, mode 0700, or creatable.

    tmux refuses to use a socket directory that others can enter, so a wrong mode breaks
    every ``poli`` command with an obscure error.
    """
    name = "socket dir"
    directory = socket_dir(ctx.env)
    config = ctx.config()
    socket = ""
    if config is not None:
        tc = config.tmux
        # A session of more agents spans further servers, <socket>-<session>-<n> beside it.
        shards = f"; {tc.shard_size} agents per server, more on {tc.socket}-{tc.session}-N"
        socket = f"{shards}; socket {directory / tc.socket}"
    own = "set TMUX_TMPDIR to a directory you own"

    def fail(detail: str, fix: str) -> list[CheckResult]:
        return [CheckResult(name, Status.FAIL, detail, fix)]

    try:
        info = directory.stat()
    except FileNotFoundError:
        parent = directory.parent
        if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
            return [CheckResult(name, Status.OK, f"{directory} will be created by tmux{socket}")]
        return fail(
            f"{directory} does not exist and {parent} is not a writable directory",
            "set TMUX_TMPDIR to a writable directory",
        )
    except OSError as exc:
        return fail(f"cannot inspect {directory}: {exc.strerror}", own)
    if not stat.S_ISDIR(info.st_mode):
        return fail(f"{directory} is not a directory", f"rm {directory}")
    if info.st_uid != os.getuid():
        uid = os.getuid()
        return fail(f"{directory} is owned by uid {info.st_uid}, not by us (uid {uid})", own)
    mode = stat.S_IMODE(info.st_mode)
    if mode != 0o700:
        return fail(f"{directory} has mode {mode:04o}; tmux needs 0700", f"chmod 700 {directory}")
    return [CheckResult(name, Status.OK, f"{directory} (mode 0700){socket}")]


# --- configuration and agents -----------------------------------------------------------


def check_config(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check that the configuration files and variables load."""
    config = ctx.config()
    if config is None:
        fix = "correct the file or variable named in the detail"
        return [CheckResult("config", Status.FAIL, str(ctx.config_error), fix)]
    read = ", ".join(str(p) for p in config.sources) or "no poli.toml found, built-in defaults"
    rows = [CheckResult("config", Status.OK, f"loaded: {read}")]
    from politerm.preflight import problems

    rows += [
        CheckResult("config", Status.FAIL, problem, "correct the profile name or template file")
        for problem in problems(config)
    ]
    return rows


def _first_line(text: str, limit: int = 80) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def probe_version(binary: str, ctx: DoctorContext) -> tuple[Status, str]:
    """How ``BINARY --version`` answers: OK with its first line, WARN or FAIL with why."""
    try:
        result = run_bounded([binary, "--version"], ctx.timeout, env=ctx.env)
    except subprocess.TimeoutExpired:
        return Status.FAIL, f"{binary} --version hangs (no answer within {ctx.timeout:g}s)"
    except OSError as exc:
        return Status.FAIL, f"cannot run {binary}: {exc.strerror or exc}"
    output = _first_line(result.stdout) or _first_line(result.stderr)
    if result.returncode != 0:
        # Not every terminal program knows --version; it may still run fine in a pane.
        return Status.WARN, f"{binary} --version exited {result.returncode}: {output or '-'}"
    return Status.OK, f"{binary} ({output or 'no version output'})"


def _setting(agent: str) -> str:
    """Where an agent's command is set: the poli.toml key, and its variable if it has one.

    Examples
    --------
    >>> _setting("PLANNER")
    'agents.PLANNER.command in poli.toml or the PLANNER_CMD environment variable'
    >>> _setting("W1")
    'agents.W1.command in poli.toml'
    """
    key = f"agents.{agent}.command in poli.toml"
    variable = f"{agent}_CMD"
    return f"{key} or the {variable} environment variable" if variable in ENV_VARS else key


def check_agents(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check that every configured agent's program is on ``PATH`` and answers ``--version``."""
    config = ctx.config()
    if config is None:
        return [CheckResult("agents", Status.WARN, "skipped: the configuration did not load")]
    rows: list[CheckResult] = []
    probed: dict[str, tuple[Status, str]] = {}
    for name, agent in config.agents.items():
        program = agent.argv()[0]
        binary = shutil.which(program, path=ctx.path)
        if binary is None:
            status, detail, fix = Status.FAIL, f"{program} not found on PATH", f"install {program}"
        else:
            if binary not in probed:
                probed[binary] = probe_version(binary, ctx)
            status, detail = probed[binary]
            fix = f"check that `{program} --version` runs without a terminal"
        fix = "" if status is Status.OK else f"{fix}, or set {_setting(name)}"
        rows.append(CheckResult(f"agent {name}", status, detail, fix))
    return rows


def check_epic_agent(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check the program ``poli go`` runs (``[epic] agent``); a default nobody chose only warns."""
    from politerm.doctor.workflows import epic_agent_rows

    return epic_agent_rows(ctx)


def check_pipeline_clis(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check the CLIs the visible pipelines' steps name (a built-in pipeline's only warn)."""
    from politerm.doctor.workflows import pipeline_cli_rows

    return pipeline_cli_rows(ctx)


def check_views(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check what poli web, poli dash and desktop notices need (each only warns)."""
    from politerm.doctor import views

    for rows in (views.web_rows, views.dash_rows, views.notice_rows, views.browser_rows):
        yield from rows(ctx)


# --- python dependencies ----------------------------------------------------------------

_REQ_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)"
)


def version_satisfies(installed: str, spec: str) -> bool:
    """Return whether version ``installed`` meets specifier ``spec`` (e.g. ``">=2.6"``).

    Examples
    --------
    >>> version_satisfies("2.13.4", ">=2.6")
    True
    >>> version_satisfies("13.6.0", ">=13.7")
    False
    """
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion

    try:
        return SpecifierSet(spec).contains(installed, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True  # a bound it cannot read is not a problem it found


def _applies(requirement: str) -> bool:
    """Whether a requirement applies here; extras (``; extra == "dev"``) never do."""
    from packaging.markers import InvalidMarker, Marker

    _, _, marker = requirement.partition(";")
    if not marker.strip():
        return True
    try:
        return Marker(marker).evaluate({"extra": ""})
    except InvalidMarker:
        return "extra" not in marker


def check_python_deps(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check that politerm's Python dependencies are installed at the required versions."""
    name = "python deps"
    try:
        requirements = importlib.metadata.requires("politerm") or []
    except importlib.metadata.PackageNotFoundError:
        detail = "politerm is not installed as a distribution; cannot list its dependencies"
        return [CheckResult(name, Status.WARN, detail, "pip install -e .")]
    problems: list[str] = []
    wanted: list[str] = []
    count = 0
    for requirement in filter(_applies, requirements):
        match = _REQ_RE.match(requirement)
        if match is None:
            continue
        count += 1
        dist, spec = match["name"], match["spec"].strip().strip("()")
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{dist} missing")
            wanted.append(f"'{dist}{spec}'")
            continue
        if spec and not version_satisfies(installed, spec):
            problems.append(f"{dist} {installed} does not meet {spec}")
            wanted.append(f"'{dist}{spec}'")
    if problems:
        return [
            CheckResult(name, Status.FAIL, "; ".join(problems), f"pip install {' '.join(wanted)}")
        ]
    return [CheckResult(name, Status.OK, f"{count} installed at the required versions")]


# --- running ----------------------------------------------------------------------------

CHECKS: list[Check] = [
    check_tmux,
    check_socket_dir,
    check_config,
    check_agents,
    check_epic_agent,
    check_python_deps,
    check_views,
]
"""The checks ``poli doctor`` runs, in order."""


def register_check(check: Check) -> Check:
    """Add ``check`` to :data:`CHECKS`; usable as a decorator."""
    CHECKS.append(check)
    return check


# --- pipelines --------------------------------------------------------------------------


@register_check
def check_pipelines(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Validate every pipeline visible from the project (project, user dir, built-ins).

    A META checkout's pipelines count too: ``META/workflows/pipelines/`` in the project, or
    the project's own ``workflows/pipelines/`` when it is a META repository.
    """
    from politerm.doctor.workflows import pipeline_files
    from politerm.pipeline.parser import validate_file

    project = (ctx.project_dir or Path.cwd()).resolve()
    found = [path for _, path in pipeline_files(project)]
    problems = [line for p in found for line in validate_file(p, project)]
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        detail, fix = "; ".join(problems[:3]) + more, "run `poli pipeline validate FILE` and fix it"
        return [CheckResult("pipelines", Status.FAIL, detail, fix)]
    return [CheckResult("pipelines", Status.OK, f"{len(found)} pipelines valid")]


register_check(check_pipeline_clis)


@register_check
def check_fleet(ctx: DoctorContext) -> Iterable[CheckResult]:
    """With ``[fleet]``: the fleet's Redis answers, accepts the user, keeps an AOF."""
    from politerm.doctor.fleet import fleet_rows

    return fleet_rows(ctx)


def doctor_timeout(env: Mapping[str, str]) -> float:
    """Return the probe timeout: ``POLI_DOCTOR_TIMEOUT`` or :data:`DEFAULT_TIMEOUT`.

    Raises
    ------
    ConfigError
        When the variable is set but not a number of seconds > 0.
    """
    value = env.get(TIMEOUT_ENV, "")
    return parse_seconds(TIMEOUT_ENV, value) if value else DEFAULT_TIMEOUT


def run_checks(
    ctx: DoctorContext | None = None, checks: Sequence[Check] | None = None
) -> list[CheckResult]:
    """Run ``checks`` (default: :data:`CHECKS`) and collect their rows.

    A check that crashes becomes a ``FAIL`` row instead of ending the report: the other
    rows are what the user needs to see.
    """
    ctx = ctx if ctx is not None else DoctorContext()
    rows: list[CheckResult] = []
    for check in CHECKS if checks is None else checks:
        name = getattr(check, "__name__", "check").removeprefix("check_").replace("_", " ")
        try:
            rows.extend(check(ctx))
        except PolitermError as exc:  # bad input the check read (a broken poli.toml): say it
            rows.append(CheckResult(name, Status.FAIL, str(exc), "correct what the detail names"))
        except Exception as exc:  # noqa: BLE001  # a broken check must not hide the rest
            rows.append(CheckResult(name, Status.FAIL, f"check crashed: {exc!r}", "report a bug"))
    return rows


def exit_code(rows: Iterable[CheckResult]) -> int:
    """Return 1 when any row failed, else 0 (warnings pass)."""
    return 1 if any(row.status is Status.FAIL for row in rows) else 0


_STYLES = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red"}


def render_table(rows: Iterable[CheckResult]) -> Table:
    """Build the rich table ``poli doctor`` prints."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="poli doctor")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    table.add_column("fix hint", overflow="fold")
    for row in rows:
        # Text(), not markup: details quote paths and argv lists full of brackets.
        table.add_row(
            Text(row.check),
            Text(row.status.value, style=_STYLES[row.status]),
            Text(row.detail),
            Text(row.fix),
        )
    return table
