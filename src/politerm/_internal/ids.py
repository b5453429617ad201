"""Ids that users give things (task ids, work item ids): what they may look like."""

from __future__ import annotations

import re

from politerm.errors import IdError

_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_id(value: str, *, kind: str = "task id") -> str:
    """Return ``value`` if it is a valid id: letters, digits, ``.``, ``_``, ``-``; 1–64 long.

    Raises
    ------
    IdError
        One line naming the id and what is allowed.

    Examples
    --------
    >>> check_id("T-1.a_b")
    'T-1.a_b'
    >>> check_id("a b")
    Traceback (most recent call last):
    ...
    politerm.errors.IdError: task id 'a b': use letters, digits, '.', '_' and '-' only (at most 64)
    """
    if not _ID.fullmatch(value) or value in (".", ".."):
        shown = value if len(value) <= 80 else value[:77] + "..."
        msg = f"{kind} {shown!r}: use letters, digits, '.', '_' and '-' only (at most 64)"
        raise IdError(msg)
    return value
