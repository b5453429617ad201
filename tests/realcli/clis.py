"""How each real CLI is run offline against the mock model server (see docs/realcli.md).

The recipes are :mod:`politerm.canary.recipes` (the canary runs the newest releases the
same way); this module adds what only the tests need: the dialogs a CLI shows when its seeding
is left out.
"""

from __future__ import annotations

import typing as t

from politerm.canary.recipes import AIDER_MODEL, API, Options, Spec
from politerm.canary.recipes import prepare as _prepare

if t.TYPE_CHECKING:
    import pathlib

    from politerm.testing.mockllm import MockLLM

__all__ = ["AIDER_MODEL", "API", "DIALOGS", "Options", "Spec", "prepare"]

# The dialog each CLI shows when its seeding is left out, and the profile answers.
DIALOGS: dict[str, tuple[str, ...]] = {
    "claude": ("folder-trust", "api-key"),
    "codex": ("folder-trust",),
    "gemini": ("folder-trust", "auth-method", "api-key"),
    "aider": ("gitignore",),
}


def prepare(
    cli: str,
    binary: pathlib.Path,
    llm: MockLLM,
    home: pathlib.Path,
    workdir: pathlib.Path,
    options: Options | None = None,
    profile_name: str | None = None,
) -> Spec:
    """Seed ``home`` for ``cli`` and return how to launch it in ``workdir``.

    Every CLI keeps its default display settings (Gemini's code-block line numbers
    included): what users see is what the tests read.
    """
    return _prepare(cli, binary, llm, home, workdir, options, profile_name)
