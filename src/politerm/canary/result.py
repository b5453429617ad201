"""One canary check's outcome, shared by the driver checks and the loop checks."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class CheckResult:
    """One check of one CLI: passed or not, what was seen, the screen when it broke."""

    name: str
    ok: bool | None  # None: not run (an earlier check failed)
    detail: str = ""
    screen: tuple[str, ...] = ()
