"""Where agent definitions and pipelines are found: the project, the user, the built-ins.

An agent definition is a markdown file ``<agent>.md`` whose text is the step's role prompt.
Pipelines are ``<name>.pipeline`` files. Both are looked up in this order:

0. pipelines only, when the project holds META's: ``<project>/META/workflows/pipelines/``
   (a META checkout inside the project), then ``<project>/workflows/pipelines/`` (the
   project is a META repository);
1. the project: ``<project>/.poli/agents/`` and ``<project>/.poli/pipelines/``;
2. the user config dir: ``~/.config/politerm/agents/`` and ``~/.config/politerm/pipelines/``;
3. the built-ins shipped in ``politerm/pipeline/builtin/``.

A name found earlier shadows the same name later (META's ``feature`` wins over the built-in
one), except between the project's own folders (META's and ``.poli/pipelines``): a name in
two of them is ambiguous, and :func:`find_pipeline` says which files it could mean.
``SOURCE:NAME`` (``builtin:feature``, ``META:feature``) picks one source.

For a run, :class:`AgentSearch` puts more directories in front of that order for agents,
where META keeps them: ``--agents DIR`` first, then the project's ``.poli/agents``, the
``[pipeline] agents_path`` directories of poli.toml, ``META/agents/`` in the project, and the
``agents/`` directory beside the repository root of a pipeline that sits in a META-style
``workflows/pipelines/`` folder.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import typing as t

import platformdirs

from politerm.errors import PipelineError

BUILTIN_DIR = pathlib.Path(__file__).parent / "builtin"
PROJECT_DIR = ".poli"
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def user_dir() -> pathlib.Path:
    """The user's politerm config dir (``~/.config/politerm``)."""
    return platformdirs.user_config_path("politerm")


META_SOURCE: t.Final = "META"
#: Sources that are the project's own: a name in two of them is ambiguous.
OWN_SOURCES: t.Final = frozenset({META_SOURCE, "project"})


def meta_pipeline_dirs(project: pathlib.Path) -> list[pathlib.Path]:
    """META's pipeline folders a project may hold, in search order (absent ones included).

    Examples
    --------
    >>> [str(d) for d in meta_pipeline_dirs(pathlib.Path("/p"))]
    ['/p/META/workflows/pipelines', '/p/workflows/pipelines']
    """
    return [project / "META" / "workflows" / "pipelines", project / "workflows" / "pipelines"]


def search_dirs(project: pathlib.Path | None, kind: str) -> list[tuple[str, pathlib.Path]]:
    """``(source, directory)`` pairs searched for ``kind`` (``agents`` or ``pipelines``)."""
    dirs: list[tuple[str, pathlib.Path]] = []
    if project is not None and kind == "pipelines":
        dirs += [(META_SOURCE, d) for d in meta_pipeline_dirs(project)]
    if project is not None:
        dirs.append(("project", project / PROJECT_DIR / kind))
    dirs.append(("user", user_dir() / kind))
    dirs.append(("builtin", BUILTIN_DIR / kind if kind == "agents" else BUILTIN_DIR))
    return dirs


def meta_root(pipeline: pathlib.Path | None) -> pathlib.Path | None:
    """The repository root of a pipeline kept META's way (``<root>/workflows/pipelines/``).

    Examples
    --------
    >>> meta_root(pathlib.Path("/r/META/workflows/pipelines/feature.pipeline"))
    PosixPath('/r/META')
    >>> meta_root(pathlib.Path("/r/META/workflows/pipelines/modules/review.steps"))
    PosixPath('/r/META')
    >>> meta_root(pathlib.Path("/p/.poli/pipelines/x.pipeline")) is None
    True
    """
    if pipeline is None:
        return None
    for folder in pipeline.parents:
        if folder.name == "pipelines" and folder.parent.name == "workflows":
            return folder.parent.parent
    return None


@dataclasses.dataclass(frozen=True)
class AgentSearch:
    """The directories searched for agent definitions, in order, each with its source."""

    dirs: tuple[tuple[str, pathlib.Path], ...]

    @classmethod
    def for_run(
        cls,
        project: pathlib.Path | None,
        *,
        pipeline: pathlib.Path | None = None,
        extra: t.Sequence[pathlib.Path] = (),
        configured: t.Sequence[str | pathlib.Path] | None = None,
    ) -> AgentSearch:
        """The search order of a run (see the module's docstring).

        ``configured`` defaults to ``[pipeline] agents_path`` of the project's poli.toml.
        """
        if configured is None:
            configured = _configured(project)
        dirs: list[tuple[str, pathlib.Path]] = [("--agents", d) for d in extra]
        builtin = search_dirs(project, "agents")
        if project is not None:
            dirs.append(builtin.pop(0))
        base = project or pathlib.Path()
        dirs += [("agents_path", base / pathlib.Path(d).expanduser()) for d in configured]
        if project is not None:
            dirs.append(("META", project / "META" / "agents"))
        root = meta_root(pipeline.resolve() if pipeline is not None else None)
        if root is not None:
            dirs.append(("pipeline repository", root / "agents"))
        return cls((*dirs, *builtin))

    def find(self, agent: str) -> pathlib.Path | None:
        """The definition file of ``agent``, or None when no directory has one."""
        if not _AGENT_NAME.match(agent):
            return None
        for _, directory in self.dirs:
            path = directory / f"{agent}.md"
            if path.is_file():
                return path
        return None

    def where(self) -> str:
        """The searched directories, for a message."""
        return ", ".join(str(d) for _, d in self.dirs)


def _configured(project: pathlib.Path | None) -> list[str]:
    from politerm.config import load_config

    return list(load_config(project).pipeline.agents_path) if project is not None else []


def find_agent(agent: str, project: pathlib.Path | None) -> pathlib.Path | None:
    """The definition file of ``agent``, or None when no directory has one."""
    return AgentSearch((*search_dirs(project, "agents"),)).find(agent)


def role_text(agent: str, project: pathlib.Path | None, search: AgentSearch | None = None) -> str:
    """The role prompt of ``agent`` (looked up through ``search``, default: the plain order).

    Raises
    ------
    PipelineError
        When no definition exists.
    """
    search = search or AgentSearch((*search_dirs(project, "agents"),))
    path = search.find(agent)
    if path is None:
        msg = f"no agent definition {agent}.md (looked in {search.where()})"
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
    """A pipeline file by path, by name through the search order, or by ``SOURCE:NAME``.

    Raises
    ------
    PipelineError
        When nothing matches, or the name is in two of the project's own folders.
    """
    path = pathlib.Path(name_or_path)
    if path.is_file():
        return path.resolve()
    if project is not None and (project / path).is_file():
        return (project / path).resolve()
    visible = list_pipelines(project)
    source, sep, bare = name_or_path.partition(":")
    if sep and source in {s for s, _ in search_dirs(project, "pipelines")}:
        hits = [p for p in visible if p.source == source and p.name == bare]
        if hits:
            return hits[0].path
    name = path.name.removesuffix(".pipeline")
    hits = [p for p in visible if p.name == name]
    own = [p for p in hits if p.source in OWN_SOURCES]
    if len(own) > 1:
        could = "; ".join(f"{p.source}:{p.name} ({p.path})" for p in own)
        msg = f"pipeline {name!r} is ambiguous, it could mean {could}: give one of these"
        raise PipelineError(msg)
    if hits:
        return hits[0].path
    known = ", ".join(sorted({p.name for p in visible})) or "none"
    msg = f"no pipeline {name_or_path!r} (known: {known})"
    raise PipelineError(msg)
