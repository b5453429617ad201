"""What changed between two overviews: the web monitor sends that, not the whole overview.

With 500 agents an overview is a few hundred kilobytes of JSON; one agent's new state
changes one row of it. The first frame of a ``/ws/overview`` connection is the whole
overview; each later frame is a delta, ``{"delta": {key: value}, "rows": {key: {"len": n,
"at": {index: row}}}}``: the top-level values that changed, and for a list whose length
and most rows stayed, only its changed rows by index (``poli.js`` applies it and redraws
those rows only).
"""

from __future__ import annotations

import typing as t

Overview = dict[str, t.Any]


def overview_delta(old: Overview, new: Overview) -> Overview | None:
    """The frame that turns ``old`` into ``new``; None when nothing changed.

    Examples
    --------
    >>> old = {"agents": [{"n": "A", "s": "ready"}, {"n": "B", "s": "ready"}], "tasks": []}
    >>> new = {"agents": [{"n": "A", "s": "ready"}, {"n": "B", "s": "busy"}], "tasks": [1]}
    >>> overview_delta(old, new)
    {'delta': {'tasks': [1]}, 'rows': {'agents': {'len': 2, 'at': {'1': {'n': 'B', 's': 'busy'}}}}}
    >>> overview_delta(new, new) is None
    True
    """
    delta: Overview = {}
    rows: dict[str, Overview] = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        if isinstance(value, list) and isinstance(before, list) and before:
            at = {
                str(i): row for i, row in enumerate(value) if i >= len(before) or before[i] != row
            }
            # Rows by index only pay while most rows stayed where they were.
            if len(at) <= len(value) // 2:
                rows[key] = {"len": len(value), "at": at}
                continue
        delta[key] = value
    gone = [key for key in old if key not in new]
    for key in gone:
        delta[key] = None
    if not delta and not rows:
        return None
    return {"delta": delta, "rows": rows}


__all__ = ["overview_delta"]
