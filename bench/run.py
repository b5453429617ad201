"""Run every benchmark: each ``bench/bench_*.py`` module's ``main()``, in name order.

``python -m bench.run [--quick] [NAME ...]`` (``NAME`` filters modules, e.g. ``engine``).

A benchmark module is found by its file name and needs one function,
``main(quick: bool = False) -> object``, that prints its own tables (see
:func:`bench._common.print_table`). A module whose ``main`` fails is reported and the
others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pathlib
import pkgutil
import sys
import time
import traceback

from bench._common import BenchError, print_machine

BENCH_DIR = pathlib.Path(__file__).parent


def discover() -> list[str]:
    """Module names of every ``bench_*`` benchmark, sorted."""
    return sorted(
        f"bench.{m.name}"
        for m in pkgutil.iter_modules([str(BENCH_DIR)])
        if m.name.startswith("bench_")
    )


def run_module(name: str, *, quick: bool) -> bool:
    """Import ``name`` and run its ``main``; False when it failed."""
    print(f"\n# {name}{' (quick)' if quick else ''}")
    sys.stdout.flush()
    start = time.monotonic()
    try:
        module = importlib.import_module(name)
        main = module.main
        if "quick" in inspect.signature(main).parameters:
            main(quick=quick)
        else:
            main()
    except BenchError as exc:
        print(f"\nBENCHMARK FAILED: {name}: {exc}", file=sys.stderr)
        return False
    except Exception:  # noqa: BLE001  # one crashed benchmark must not stop the others
        print(f"\nBENCHMARK CRASHED: {name}", file=sys.stderr)
        traceback.print_exc()
        return False
    print(f"\n({name}: {time.monotonic() - start:.1f} s)")
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks named (all by default); return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples (under a minute)")
    parser.add_argument("names", nargs="*", help="only modules whose name contains one of these")
    args = parser.parse_args(argv)
    modules = [m for m in discover() if not args.names or any(n in m for n in args.names)]
    if not modules:
        parser.error(f"no benchmark matches {args.names}")
    print_machine()
    start = time.monotonic()
    failed = [m for m in modules if not run_module(m, quick=args.quick)]
    print(f"\ntotal: {time.monotonic() - start:.1f} s")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
