"""Commands of the bundled profiles: their ``python`` is the interpreter politerm runs on."""

from __future__ import annotations

import sys

#: The module every workflow runs as its stand-in agent.
FAKE_AGENT_MODULE = "politerm.testing.fakeagent"


def own_python(argv: list[str]) -> list[str]:
    """``argv`` with a leading ``python -m politerm.…`` run by politerm's own interpreter.

    Installed with pipx or ``uv tool``, politerm lives in a venv of its own, so the
    ``python`` on PATH (if any) cannot import it; other commands are left as they are.

    Examples
    --------
    >>> own_python(["python", "-m", "politerm.testing.fakeagent"])[0] == sys.executable
    True
    >>> own_python(["python", "-m", "aider"]), own_python(["claude"])
    (['python', '-m', 'aider'], ['claude'])
    """
    if argv[:2] == ["python", "-m"] and argv[2:3] and argv[2].startswith("politerm."):
        return [sys.executable, *argv[1:]]
    return argv
