"""Where the web monitor finds xterm.js and its fonts: never committed, looked up in order.

1. ``POLI_WEB_ASSETS=DIR``: ``DIR/node_modules``, when set (a wrong setting is reported, not
   hidden by another copy);
2. an installed wheel's own copy, ``politerm/ui/web/js``, put there at build time
   (``hatch_build.py``); or, run from a checkout, its ``.cache/web/node_modules``, filled by
   ``scripts/_setup.sh``.

Each is filled by :mod:`politerm.ui.web.jsdeps` (pinned, verified). The pages then load
everything from this server, so they work offline.
"""

from __future__ import annotations

import os
import pathlib
import typing as t

from politerm.errors import WebAssetsMissing
from politerm.ui.web.jsdeps import FILES

__all__ = [
    "BUNDLED",
    "CHECKOUT",
    "FILES",
    "candidates",
    "how_to_install",
    "in_checkout",
    "node_modules",
]

#: The wheel's copy, next to the pages.
BUNDLED = pathlib.Path(__file__).with_name("js")
# src/politerm/ui/web/assets.py -> the checkout's root (in a wheel: nothing that matters)
_ROOT = pathlib.Path(__file__).resolve().parents[4]
#: A checkout's copy, filled by scripts/_setup.sh.
CHECKOUT = _ROOT / ".cache" / "web" / "node_modules"


def in_checkout() -> bool:
    """Whether this politerm runs from a source checkout (an editable install) or a wheel."""
    return (_ROOT / "pyproject.toml").is_file() and (_ROOT / "src" / "politerm").is_dir()


def candidates(env: t.Mapping[str, str] | None = None) -> list[pathlib.Path]:
    """The ``node_modules`` directories looked in, in order (``env``: the environment)."""
    given = (os.environ if env is None else env).get("POLI_WEB_ASSETS")
    if given:
        return [pathlib.Path(given).expanduser() / "node_modules"]
    # A wheel never has the checkout's copy and a checkout never has the wheel's.
    return [CHECKOUT] if in_checkout() else [BUNDLED]


def how_to_install(env: t.Mapping[str, str] | None = None) -> str:
    """How to get the files, said for this politerm: as configured, a checkout, or a wheel."""
    given = (os.environ if env is None else env).get("POLI_WEB_ASSETS")
    if given:
        return f"run `python -m politerm.ui.web {given}`, or unset POLI_WEB_ASSETS"
    if in_checkout():
        return "run `python -m politerm.ui.web .cache/web` in the checkout (scripts/test does)"
    return (
        "reinstall politerm from a wheel built with its build hook (`pipx install --force .` in "
        "a checkout), or run `python -m politerm.ui.web DIR` and set POLI_WEB_ASSETS=DIR"
    )


def node_modules(env: t.Mapping[str, str] | None = None) -> pathlib.Path:
    """The ``node_modules`` directory holding xterm.js and the fonts.

    Raises
    ------
    WebAssetsMissing
        When no candidate holds every file in :data:`FILES`.
    """
    tried = candidates(env)
    for modules in tried:
        if all((modules / f).is_file() for f in FILES):
            return modules
    msg = (
        "xterm.js is not installed (looked in "
        + ", ".join(map(str, tried))
        + f"): {how_to_install(env)}"
    )
    raise WebAssetsMissing(msg)
