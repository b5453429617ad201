"""Where the web monitor finds xterm.js and its fonts: never committed, looked up in order.

1. ``POLI_WEB_ASSETS=DIR``: ``DIR/node_modules``, when set (a wrong setting is reported, not
   hidden by another copy);
2. the wheel's own copy, ``politerm/ui/web/js``, put there at build time (``hatch_build.py``);
3. the checkout's ``.cache/web/node_modules``, filled by ``scripts/_setup.sh``.

Each is filled by :mod:`politerm.ui.web.jsdeps` (pinned, verified). The pages then load
everything from this server, so they work offline.
"""

from __future__ import annotations

import os
import pathlib

from politerm.errors import WebAssetsMissing
from politerm.ui.web.jsdeps import FILES

__all__ = ["FILES", "node_modules"]

#: The wheel's copy, next to the pages.
BUNDLED = pathlib.Path(__file__).with_name("js")


def _candidates() -> list[pathlib.Path]:
    env = os.environ.get("POLI_WEB_ASSETS")
    if env:
        return [pathlib.Path(env).expanduser() / "node_modules"]
    # src/politerm/ui/web/assets.py -> the checkout root
    checkout = pathlib.Path(__file__).resolve().parents[4] / ".cache" / "web" / "node_modules"
    return [BUNDLED, checkout]


def node_modules() -> pathlib.Path:
    """The ``node_modules`` directory holding xterm.js and the fonts.

    Raises
    ------
    WebAssetsMissing
        When no candidate holds every file in :data:`FILES`.
    """
    tried = []
    for modules in _candidates():
        tried.append(str(modules))
        if all((modules / f).is_file() for f in FILES):
            return modules
    msg = (
        "xterm.js is not installed (looked in " + ", ".join(tried) + "): in a checkout run "
        "scripts/_setup.sh; otherwise reinstall politerm from a wheel built with its build hook, "
        "or run `python -m politerm.ui.web DIR` and set POLI_WEB_ASSETS=DIR"
    )
    raise WebAssetsMissing(msg)
