"""Where the web monitor finds xterm.js: installed from the npm registry, never committed.

``scripts/_setup.sh`` runs ``npm install --prefix .cache/web @xterm/xterm @xterm/addon-fit``
in the checkout; ``POLI_WEB_ASSETS`` names another ``node_modules`` parent instead (an
installed politerm has no checkout). The pages then load xterm.js from this server, so they work
offline.
"""

from __future__ import annotations

import os
import pathlib

from politerm.errors import WebAssetsMissing

#: Files the pages load, relative to ``node_modules``.
FILES = (
    "@xterm/xterm/lib/xterm.js",
    "@xterm/xterm/css/xterm.css",
    "@xterm/addon-fit/lib/addon-fit.js",
)


def _candidates() -> list[pathlib.Path]:
    env = os.environ.get("POLI_WEB_ASSETS")
    if env:
        # Chosen explicitly: a wrong setting is reported, not hidden by the checkout's copy.
        return [pathlib.Path(env).expanduser()]
    # src/politerm/ui/web/assets.py -> the checkout root
    return [pathlib.Path(__file__).resolve().parents[4] / ".cache" / "web"]


def node_modules() -> pathlib.Path:
    """The ``node_modules`` directory holding xterm.js.

    Raises
    ------
    WebAssetsMissing
        When no candidate holds every file in :data:`FILES`.
    """
    tried = []
    for base in _candidates():
        modules = base / "node_modules"
        tried.append(str(modules))
        if all((modules / f).is_file() for f in FILES):
            return modules
    msg = (
        "xterm.js is not installed (looked in " + ", ".join(tried) + "): run scripts/_setup.sh, "
        "or `npm install --prefix DIR @xterm/xterm @xterm/addon-fit` and set POLI_WEB_ASSETS=DIR"
    )
    raise WebAssetsMissing(msg)
