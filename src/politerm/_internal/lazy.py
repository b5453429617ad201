"""A package's public names imported on first use (a module-level ``__getattr__``).

A package that re-exports its modules' names makes ``import politerm.pkg.small`` import
every module of the package; the views (``poli dash``, ``poli status``) start faster when
only the modules they use are imported. The names stay declared for type checkers under
``t.TYPE_CHECKING`` in the package itself.
"""

from __future__ import annotations

import importlib
import typing as t


def lazy_names(package: str, where: dict[str, str]) -> t.Callable[[str], t.Any]:
    """The ``__getattr__`` of ``package``: each name of ``where`` from its module.

    Parameters
    ----------
    package
        The package's dotted name (its ``__name__``).
    where
        Public name → the package's module (relative name) that defines it.

    Examples
    --------
    >>> getter = lazy_names("politerm.agents", {"AgentState": "state"})
    >>> getter("AgentState").__name__
    'AgentState'
    >>> getter("Nope")
    Traceback (most recent call last):
    ...
    AttributeError: module 'politerm.agents' has no attribute 'Nope'
    """

    def __getattr__(name: str) -> t.Any:
        module = where.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
