"""Dynamic shell completion: pipeline names, run ids, task ids and agent names.

Click calls these while the shell asks for completions (``_POLI_COMPLETE=…``); each reads
the current project quietly and offers what starts with the word typed so far. A project
that cannot be read offers nothing rather than printing an error into the user's prompt.
"""

from __future__ import annotations

import contextlib
import pathlib
import typing as t

from click.shell_completion import CompletionItem

if t.TYPE_CHECKING:
    import click

    from politerm.store import RunStore

SHELLS: t.Final = ("bash", "zsh", "fish")


def _offer(words: t.Iterable[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(w) for w in sorted(set(words)) if w.startswith(incomplete)]


def pipelines(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Pipeline names visible from the current project (and ``*.pipeline`` files)."""
    from politerm.pipeline.agents import list_pipelines

    names: list[str] = []
    with contextlib.suppress(Exception):
        names = [p.name for p in list_pipelines(pathlib.Path.cwd())]
    with contextlib.suppress(OSError):
        names += [str(p) for p in pathlib.Path.cwd().glob("*.pipeline")]
    return _offer(names, incomplete)


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Run ids of the current project's pipeline runs."""
    from politerm.pipeline.state import project_runs

    ids: list[str] = []
    with contextlib.suppress(Exception):
        ids = [r.get("run_id", "") for r in project_runs(pathlib.Path.cwd())]
    return _offer([i for i in ids if i], incomplete)


def task_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Ids of the current project's tasks, newest last."""
    ids: list[str] = []
    with contextlib.suppress(Exception), _store() as store:
        ids = [task.id for task in store.list_tasks()]
    return _offer(ids, incomplete)


def agent_names(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Agent names of the current project (configured and seen in its store)."""
    from politerm.config import load_config

    names: list[str] = []
    with contextlib.suppress(Exception):
        names = list(load_config().agents)
    with contextlib.suppress(Exception), _store() as store:
        names += [agent.name for agent in store.list_agents()]
    return _offer(names, incomplete)


def _store() -> RunStore:
    from politerm.config import load_config
    from politerm.store import RunStore

    # Completing must never create (nor migrate) a store.
    return RunStore.open_existing(load_config().store.resolved_path())


def script(shell: str, prog: str = "poli") -> str:
    """The completion script for ``shell``, as click writes it for ``prog``.

    Examples
    --------
    >>> "complete" in script("bash")
    True
    """
    from click.shell_completion import get_completion_class

    from politerm.cli import cli

    cls = get_completion_class(shell)
    if cls is None:
        msg = f"no completion for shell {shell!r} (choose from {', '.join(SHELLS)})"
        raise ValueError(msg)
    var = f"_{prog.replace('-', '_').upper()}_COMPLETE"
    return cls(cli, {}, prog, var).source()
