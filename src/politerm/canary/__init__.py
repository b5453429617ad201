"""``poli agents canary``: the newest release of each agent CLI, run through the checks.

:func:`run_canary` installs each CLI's newest published version into a cache
(:mod:`politerm.canary.install`), runs the ``agents check`` scenarios against a loopback
model server (:mod:`politerm.canary.checks`), then the Planner⇄Executer loop under ``ask``
with approval patterns, a command taller than the screen and two tasks in a row
(:mod:`politerm.canary.loop`), and returns one :class:`CanaryResult` per
CLI; :func:`render` prints them as a table with the screen lines where a detector broke.
CI keeps the pinned versions of ``tests/realcli``; the canary is run by hand and its
results are recorded in ``docs/realcli.md``.
"""

from __future__ import annotations

import typing as t

from politerm.canary.checks import CHECKS, CanaryResult, run_checks
from politerm.canary.install import (
    CLIS,
    InstalledCli,
    binary_version,
    default_cache,
    install,
    newest_version,
)
from politerm.canary.loop import run_loop_checks
from politerm.canary.result import CheckResult
from politerm.errors import CanaryError

if t.TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping, Sequence

    from rich.console import RenderableType

__all__ = [
    "CHECKS",
    "CLIS",
    "CanaryResult",
    "CheckResult",
    "InstalledCli",
    "render",
    "run_canary",
]


async def run_canary(
    clis: Sequence[str],
    *,
    cache: pathlib.Path | None = None,
    bins: Mapping[str, pathlib.Path] | None = None,
    ready_timeout: float = 120.0,
    turn_timeout: float = 120.0,
    loop_timeout: float = 300.0,
    say: t.Callable[[str], None] | None = None,
) -> list[CanaryResult]:
    """Install (or take from ``bins``) each CLI and run its checks, one CLI after another.

    The checks on the driver first (:mod:`politerm.canary.checks`), then, on a CLI that
    came up ready, the loop's (:mod:`politerm.canary.loop`), each task within
    ``loop_timeout`` seconds.

    Raises
    ------
    CanaryError
        A name that is not a known CLI (before anything is installed).
    """
    from politerm.testing.mockllm import MockLLM

    say = say or (lambda _line: None)
    unknown = [c for c in clis if c not in CLIS]
    if unknown:
        msg = f"no canary recipe for {', '.join(map(repr, unknown))} (known: {', '.join(CLIS)})"
        raise CanaryError(msg)
    bins = bins or {}
    cache = cache or default_cache()
    results: list[CanaryResult] = []
    for cli in clis or CLIS:
        try:
            if cli in bins:
                installed = InstalledCli(cli, binary_version(cli, bins[cli]), bins[cli])
            else:
                version = newest_version(cli)
                say(f"{cli}: newest published version {version}; installing into {cache}")
                installed = install(cli, version, cache)
        except CanaryError as exc:
            results.append(CanaryResult(cli, "?", error=str(exc)))
            say(f"{cli}: {exc}")
            continue
        with MockLLM() as llm:
            result = await run_checks(
                installed, llm, ready_timeout=ready_timeout, turn_timeout=turn_timeout, say=say
            )
            ready = result.checks.get("ready")
            if ready is not None and ready.ok:
                for check in await run_loop_checks(installed, llm, timeout=loop_timeout, say=say):
                    result.checks[check.name] = check
            results.append(result)
    return results


def render(results: Sequence[CanaryResult]) -> RenderableType:
    """The results as a table (one row per CLI), then each broken check's screen lines."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from politerm._internal.sanitize import escape_controls

    table = Table(title="agent CLI canary")
    for col in ("cli", "version", *CHECKS):
        table.add_column(col)
    parts: list[RenderableType] = [table]
    for r in results:
        cells: list[Text | str] = []
        for name in CHECKS:
            check = r.checks.get(name)
            if check is None or check.ok is None:
                cells.append(Text("-", "dim"))
            else:
                cells.append(Text("ok", "green") if check.ok else Text("FAIL", "bold red"))
        table.add_row(r.cli, r.version, *cells)
        if r.error:
            parts.append(Text(f"{r.cli}: {escape_controls(r.error)}", "red"))
        for check in r.checks.values():
            if check.ok:
                continue
            head = Text(f"{r.cli} {r.version}: {check.name}: {escape_controls(check.detail)}")
            screen = "\n".join(f"  | {escape_controls(ln)}" for ln in check.screen)
            parts.extend([head, Text(screen)])
    return Group(*parts)
