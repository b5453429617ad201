"""Times as politerm's lines and tables show them."""

from __future__ import annotations

import datetime


def time_of_day(ts: float | None) -> str:
    """``ts`` (seconds since the epoch) as local ``HH:MM:SS``; ``-`` when not known."""
    return datetime.datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else "-"
