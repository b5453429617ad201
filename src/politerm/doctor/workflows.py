"""Doctor checks of the programs the workflows start: the epic agent and pipeline step CLIs.

A program that is missing is a ``FAIL`` when the project chose it (``[epic] agent`` in a
configuration file, a step CLI in one of the project's own pipelines) and a ``WARN`` when it
is only a default nobody asked for: a fresh machine without codex can still run everything
else, so ``poli doctor`` must not fail there.
"""

from __future__ import annotations

import shutil
import typing as t
from pathlib import Path

from politerm.doctor import CheckResult, Status, probe_version
from politerm.pipeline.agents import OWN_SOURCES

if t.TYPE_CHECKING:
    from collections.abc import Iterable

    from politerm.doctor import DoctorContext


def pipeline_files(project: Path) -> list[tuple[str, Path]]:
    """Every pipeline file visible from ``project`` with its source (project, user, builtin, META).

    A META checkout's pipelines count too: ``META/workflows/pipelines/`` in the project, or
    the project's own ``workflows/pipelines/`` when it is a META repository.
    """
    from politerm.pipeline.agents import list_pipelines

    return [(p.source, p.path) for p in list_pipelines(project)]


def _probe(program: str, ctx: DoctorContext) -> tuple[Status, str]:
    """FAIL when ``program`` is not on PATH, else how it answers ``--version``."""
    binary = shutil.which(program, path=ctx.path)
    if binary is None:
        return Status.FAIL, f"{program} not found on PATH"
    return probe_version(binary, ctx)


def epic_agent_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check the program ``poli go`` runs for each work item (``[epic] agent``)."""
    from politerm.agents.profile import load_profile
    from politerm.errors import ProfileError

    config = ctx.config()
    if config is None:
        return [CheckResult("epic agent", Status.WARN, "skipped: the configuration did not load")]
    name = config.epic.agent
    chosen = "agent" in config.epic.model_fields_set or name in config.epic.commands
    try:
        argv = config.epic.commands.get(name) or list(load_profile(name).command)
    except ProfileError as exc:
        fix = "set [epic] agent in poli.toml to a known profile"
        return [CheckResult("epic agent", Status.FAIL, str(exc), fix)]
    if not argv:
        fix = f"set [epic.commands] {name} = [...] in poli.toml"
        return [CheckResult("epic agent", Status.FAIL, f"profile {name!r} has no command", fix)]
    status, detail = _probe(argv[0], ctx)
    if status is Status.OK:
        return [CheckResult("epic agent", status, f"{name}: {detail}")]
    if status is Status.FAIL and not chosen:
        status, detail = Status.WARN, f"{detail}; `poli go` needs it (default [epic] agent)"
    fix = (
        f"install {argv[0]}, or set [epic] agent (and [epic.commands] {name}) in poli.toml, "
        "or run `poli go EPIC --agent NAME`"
    )
    return [CheckResult("epic agent", status, detail, fix)]


def pipeline_cli_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Check the CLIs the visible pipelines' steps name (``-``: the default, claude)."""
    from politerm.agents.profile import load_profile
    from politerm.errors import PolitermError
    from politerm.pipeline.launch import DEFAULT_CLI, FAKE
    from politerm.pipeline.parser import interactive_cli, load_pipeline

    project = (ctx.project_dir or Path.cwd()).resolve()
    users: dict[str, list[tuple[str, str]]] = {}  # cli -> (pipeline, source)
    for source, path in pipeline_files(project):
        try:
            pipe = load_pipeline(path, project)
        except PolitermError:
            continue  # the pipelines check reports it
        for step in pipe.steps:
            cli = interactive_cli(step.cli)[1] or DEFAULT_CLI
            if cli != FAKE and (pipe.name, source) not in users.setdefault(cli, []):
                users[cli].append((pipe.name, source))
    rows: list[CheckResult] = []
    for cli, used in sorted(users.items()):
        check = f"pipeline cli {cli}"
        by = ", ".join(f"{name} ({source})" for name, source in used)
        try:
            argv = list(load_profile(cli).command)
        except PolitermError as exc:
            fix = "correct the CLI column of those pipelines"
            rows.append(CheckResult(check, Status.FAIL, f"{exc}; used by {by}", fix))
            continue
        program = argv[0] if argv else cli
        status, detail = _probe(program, ctx) if argv else (Status.FAIL, "profile has no command")
        if status is Status.OK:
            rows.append(CheckResult(check, status, f"{detail}; used by {by}"))
            continue
        own = any(source in OWN_SOURCES for _, source in used)
        if status is Status.FAIL and not own:
            status = Status.WARN
        fix = f"install {program}, or run with `poli run PIPELINE --cli OTHER` (--cli fake to try)"
        rows.append(CheckResult(check, status, f"{detail}; used by {by}", fix))
    return rows
