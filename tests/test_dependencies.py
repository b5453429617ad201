"""Every third-party module politerm imports at run time is a runtime dependency.

A plain ``pip install .`` installs only ``[project] dependencies``: a module imported by
shipped code but listed only for development (``poli agents canary`` imported aiohttp that
way) fails for a user with ``No module named …``. Imports under ``t.TYPE_CHECKING`` and
imports guarded by ``except ImportError`` (optional features that say what to install) do
not count.
"""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "politerm"


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert m is not None, requirement
    return re.sub(r"[-_.]+", "-", m.group(0)).lower()


class _Imports(ast.NodeVisitor):
    """Top-level names of the modules a file imports when it runs, with their lines."""

    def __init__(self) -> None:
        self.found: dict[str, int] = {}
        self._optional = 0

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        caught = " ".join(ast.unparse(h.type) for h in node.handlers if h.type is not None)
        if "ImportError" not in caught and "ModuleNotFoundError" not in caught:
            self.generic_visit(node)
            return
        self._optional += 1
        for child in node.body:
            self.visit(child)
        self._optional -= 1
        rest: list[ast.AST] = [*node.handlers, *node.orelse, *node.finalbody]
        for part in rest:
            self.visit(part)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._add(node.module, node.lineno)

    def _add(self, module: str, line: int) -> None:
        top = module.split(".")[0]
        if not self._optional and top != "politerm" and top not in sys.stdlib_module_names:
            self.found.setdefault(top, line)


def runtime_imports() -> dict[str, str]:
    """Each third-party top-level module shipped code imports, and one place it does."""
    where: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(), str(path)))
        for module, line in visitor.found.items():
            where.setdefault(module, f"{path.relative_to(ROOT)}:{line}")
    return where


def test_every_runtime_import_is_a_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module, where in runtime_imports().items():
        names = {_name(d) for d in distributions.get(module, [module])}
        if not names & declared:
            missing.append(f"{module} ({', '.join(sorted(names))}) imported at {where}")
    assert not missing, "imported at run time but not in [project] dependencies:\n" + "\n".join(
        missing
    )


def test_the_check_sees_an_import_a_user_would_miss() -> None:
    visitor = _Imports()
    visitor.visit(ast.parse("import typing as t\nif t.TYPE_CHECKING:\n    import a\nimport b\n"
                            "try:\n    import c\nexcept ImportError:\n    c = None\n"
                            "def f():\n    from d.e import g\n"))  # fmt: skip
    assert set(visitor.found) == {"b", "d"}
