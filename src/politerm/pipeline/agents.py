"""Where agent definitions and pipelines are found: the project, the user, the built-ins.

An agent definition is a markdown file ``<agent>.md`` whose text is the step's role prompt.
Pipelines are ``<name>.pipeline`` files. Both are looked up in this order:

1. the project: ``<project>/.poli/agents/`` and ``<project>/.poli/pipelines/``;
2. the user config dir: ``~/.config/politerm/agents/`` and ``~/.config/politerm/pipelines/``;
3. the built-ins shipped in ``politerm/pipeline/builtin/``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import platformdirs

from politerm.errors import PipelineError

BUILTIN_DIR = pathlib.Path(__file__).parent / "builtin"
PROJECT_DIR = ".poli"
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def user_dir() -> pathlib.Path:
    """The user's politerm config dir (``~/.config/politerm``)."""
    return platformdirs.user_config_path("politerm")


def search_dirs(project: pathlib.Path | None, kind: str) -> list[tuple[str, pathlib.Path]]:
    """``(source, directory)`` pairs searched for ``kind`` (``agents`` or ``pipelines``)."""
    dirs: list[tuple[str, pathlib.Path]] = []
    if project is not None:
        dirs.append(("project", project / PROJECT_DIR / kind))
    dirs.append(("user", user_dir() / kind))
    dirs.append(("builtin", BUILTIN_DIR / kind if kind == "agents" else BUILTIN_DIR))
    return dirs


def find_agent(agent: str, project: pathlib.Path | None) -> pathlib.Path | None:
    """The definition file of ``agent``, or None when no directory has one."""
    if not _AGENT_NAME.match(agent):
        return None
    for _, directory in search_dirs(project, "agents"):
        path = directory / f"{agent}.md"
        if path.is_file():
            return path
    return None


def role_text(agent: str, project: pathlib.Path | None) -> str:
    """The role prompt of ``agent``.

    Raises
    ------
    PipelineError
        When no definition exists.
    """
    path = find_agent(agent, project)
    if path is None:
        where = ", ".join(str(d) for _, d in search_dirs(project, "agents"))
        msg = f"no agent definition {agent}.md (looked in {where})"
        raise PipelineError(msg)
    return path.read_text(encoding="utf-8").strip()


@dataclasses.dataclass(frozen=True)
class PipelineFile:
    """A pipeline found on disk."""

    name: str
    path: pathlib.Path
    source: str
    shadowed: bool = False


def list_pipelines(project: pathlib.Path | None) -> list[PipelineFile]:
    """Every pipeline visible from ``project``; a name found earlier shadows later ones."""
    seen: set[str] = set()
    out: list[PipelineFile] = []
    for source, directory in search_dirs(project, "pipelines"):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.pipeline")):
            out.append(PipelineFile(path.stem, path, source, shadowed=path.stem in seen))
            seen.add(path.stem)
    return out


def find_pipeline(name_or_path: str, project: pathlib.Path | None) -> pathlib.Path:
    """A pipeline file by path, or by name through the search order.

    Raises
    ------
    PipelineError
        When nothing matches.
    """
    path = pathlib.Path(name_or_path)
    if path.is_file():
        return path.resolve()
    if project is not None and (project / path).is_file():
        return (project / path).resolve()
    name = path.name.removesuffix(".pipeline")
    for found in list_pipelines(project):
        if found.name == name and not found.shadowed:
            return found.path
    known = ", ".join(sorted({p.name for p in list_pipelines(project)})) or "none"
    msg = f"no pipeline {name_or_path!r} (known: {known})"
    raise PipelineError(msg)
