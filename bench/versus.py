"""This tree against an earlier commit, in one run: does a change make a benchmark slower?

``python -m bench.versus [--ref REV] [--rounds N] [--full] [NAME ...]`` checks
``REV`` out into a temporary git worktree and runs the named benchmark modules (default
``loop`` and ``idle``, each in its quick form unless ``--full``) in both trees in turn,
``ref, this, ref, this, …`` for ``N`` rounds, each in a fresh process with its own tree's
``src/`` and ``bench/``, so each side measures its own code with its own benchmark.
Interleaving spreads the machine's other load over both sides. It then prints, for every
numeric cell the two sides share (same table, same row, same column), the median of each
side over the rounds and their ratio ``ref / this`` (above 1: this tree is faster or
smaller), plus the load average around each round.

The default ``REV`` is ``23c0c12``, main when issue 21 ("one door to every agent") was
filed: its "handoff latency and idle cost do not regress" is read off this table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from bench._common import Cell, Row, print_table, ratio

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_REF = "23c0c12"
DEFAULT_MODULES = ("loop", "idle")
# One side's run of one module; it writes its tables as JSON to the path in argv[1].
_CHILD = """
import importlib, json, sys
module = importlib.import_module(sys.argv[2])
tables = module.main(quick=sys.argv[3] == "quick")
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(tables, out)
"""
Key = tuple[str, str, str]
"""(table, row label, column)."""


PARAMETERS = ("agents", "shard size")
"""Numeric columns that say what a row is about (not what was measured)."""


def _label(row: Row) -> str:
    """A row's name: its text cells and parameters, joined (other numbers are measured)."""
    named = (f"{v} {k}" if k in PARAMETERS else str(v) for k, v in row.items())
    picked = [
        n
        for (k, v), n in zip(row.items(), named, strict=True)
        if k in PARAMETERS or isinstance(v, str)
    ]
    return " / ".join(picked) or "?"


def numeric_cells(tables: dict[str, list[Row]]) -> dict[Key, float]:
    """Every number in ``tables``, keyed by (table, row label, column).

    Examples
    --------
    >>> numeric_cells({"t": [{"agents": 10, "what": "a", "p50 ms": 2.0, "note": "x"}]})
    {('t', '10 agents / a / x', 'p50 ms'): 2.0}
    """
    cells: dict[Key, float] = {}
    for title, rows in tables.items():
        for row in rows:
            label = _label(row)
            for column, value in row.items():
                if column in PARAMETERS:
                    continue
                if isinstance(value, int | float) and not isinstance(value, bool):
                    cells[(title, label, column)] = float(value)
    return cells


def _run_side(tree: pathlib.Path, module: str, *, quick: bool) -> dict[str, list[Row]]:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{tree}")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, "-c", _CHILD, out.name, f"bench.bench_{module}"]
        argv.append("quick" if quick else "full")
        done = subprocess.run(argv, cwd=tree, env=env, check=False)
        if done.returncode != 0:
            msg = f"bench_{module} failed in {tree} (exit {done.returncode})"
            raise SystemExit(msg)
        loaded: dict[str, list[Row]] = json.loads(pathlib.Path(out.name).read_text("utf-8"))
        return loaded


def compare(ref_runs: list[dict[Key, float]], this_runs: list[dict[Key, float]]) -> list[Row]:
    """One row per shared cell: the median of each side and ``ref / this``.

    Examples
    --------
    >>> k = ("t", "a", "p50 ms")
    >>> compare([{k: 4.0}, {k: 6.0}], [{k: 2.0}, {k: 3.0}])[0]["ref / this"]
    2.0
    """
    shared = set.intersection(*(set(r) for r in ref_runs + this_runs))
    rows: list[Row] = []
    for key in sorted(shared):
        ref = statistics.median(r[key] for r in ref_runs)
        this = statistics.median(r[key] for r in this_runs)
        cells: dict[str, Cell] = {"table": key[0], "row": key[1], "column": key[2]}
        cells |= {"ref": ref, "this": this, "ref / this": ratio(ref, this)}
        rows.append(cells)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print its table; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__)
    parser.add_argument("--ref", default=DEFAULT_REF, help=f"the commit (default {DEFAULT_REF})")
    parser.add_argument("--rounds", type=int, default=2, help="ref/this pairs (default 2)")
    parser.add_argument("--full", action="store_true", help="each module's full form")
    parser.add_argument("names", nargs="*", default=list(DEFAULT_MODULES))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poli-versus-") as scratch:
        ref_tree = pathlib.Path(scratch) / "ref"
        add = ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(ref_tree)]
        subprocess.run([*add, args.ref], check=True)
        try:
            for name in args.names:
                sides: dict[str, list[dict[Key, float]]] = {"ref": [], "this": []}
                loads: list[str] = []
                for _ in range(args.rounds):
                    for side, tree in (("ref", ref_tree), ("this", ROOT)):
                        tables = _run_side(tree, name, quick=not args.full)
                        sides[side].append(numeric_cells(tables))
                    loads.append(f"{os.getloadavg()[0]:.1f}")
                title = f"bench_{name}: {args.ref} (ref) against this tree"
                print_table(title, compare(sides["ref"], sides["this"]))
                print(f"(load average after each round: {', '.join(loads)})")
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_tree)],
                check=False,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
