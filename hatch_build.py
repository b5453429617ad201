"""The wheel's build hook: put the pinned xterm.js and fonts into the wheel.

They are fetched from the npm registry (or the download cache), verified against their pinned
sha512 and unpacked by ``politerm.ui.web.jsdeps`` into a temporary directory that the wheel
maps to ``politerm/ui/web/js``. Nothing is written into the source tree. An editable install
skips this: it serves the checkout's ``.cache/web`` (``scripts/_setup.sh``).
"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import sys
import tempfile
import typing as t

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = pathlib.Path(__file__).resolve().parent


def _jsdeps() -> t.Any:
    # politerm is not installed while its wheel is built: load the module from the tree
    # (its only import, politerm.errors, needs src on the path).
    sys.path.insert(0, str(ROOT / "src"))
    try:
        path = ROOT / "src" / "politerm" / "ui" / "web" / "jsdeps.py"
        spec = importlib.util.spec_from_file_location("_politerm_jsdeps", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "src"))


class JsDepsHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds ``politerm/ui/web/js`` to a standard wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, t.Any]) -> None:
        """Fetch, verify and unpack the packages; map them into the wheel."""
        if self.target_name != "wheel" or version == "editable":
            return
        self._tmp = tempfile.mkdtemp(prefix="politerm-js-")
        modules = _jsdeps().install(pathlib.Path(self._tmp) / "node_modules")
        build_data["force_include"][str(modules)] = "politerm/ui/web/js"

    def finalize(self, version: str, build_data: dict[str, t.Any], artifact_path: str) -> None:
        """Remove the temporary directory."""
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
