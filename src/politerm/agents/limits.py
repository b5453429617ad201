"""When a usage or rate limit resets, read from the words an agent CLI shows.

The CLIs say it in many ways: "resets 3pm (Europe/Berlin)", "try again at 3:15 PM",
"try again in 2 hours 5 minutes", "Retrying in 30s", "retry in 8s", an ISO timestamp.
:func:`parse_reset` turns any of them into a point in time; the profile's
``detectors.limit_reset`` regexes find the words (their ``reset`` group) on the screen.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import typing as t
import zoneinfo

from politerm._internal.clock import time_of_day
from politerm.agents._linememo import shows_any

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.terminal import Snapshot

_UNITS = {
    "d": 86400.0,
    "day": 86400.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
}
_AMOUNT = re.compile(
    r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b",
    re.IGNORECASE,
)
_CLOCK = re.compile(
    r"(?P<h>\d{1,2})(?::(?P<m>\d{2}))?(?::(?P<s>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?(?![\d:])",
    re.IGNORECASE,
)
_ZONE = re.compile(r"\(([A-Za-z_]+(?:/[A-Za-z_+\-0-9]+)*)\)")
# A clock time this little in the past is the limit lifting now, not tomorrow's.
_GRACE = dt.timedelta(minutes=10)
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def _duration(text: str) -> float | None:
    """Seconds in ``2 hours 5 minutes`` / ``1h30m`` / ``45s``; None when there is none."""
    total, found = 0.0, False
    for m in _AMOUNT.finditer(text):
        unit = m.group("unit").lower().rstrip("s") or "s"
        total += float(m.group("n")) * _UNITS.get(unit, _UNITS.get(m.group("unit").lower(), 1.0))
        found = True
    return total if found else None


def _zone(text: str, now: dt.datetime) -> dt.tzinfo:
    m = _ZONE.search(text)
    if m:
        try:
            return zoneinfo.ZoneInfo(m.group(1))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    return now.tzinfo or dt.UTC


def parse_reset(text: str, now: dt.datetime) -> dt.datetime | None:
    """The moment a limit described by ``text`` resets, or None when ``text`` says none.

    ``now`` (timezone-aware) anchors relative times; a clock time names the next such time
    (in the zone given in parentheses, else ``now``'s zone).

    Examples
    --------
    >>> now = dt.datetime(2026, 11, 23, 14, 0, tzinfo=dt.UTC)
    >>> parse_reset("in 2 hours 5 minutes", now).isoformat()
    '2026-11-23T16:05:00+00:00'
    >>> parse_reset("30s", now).isoformat()
    '2026-11-23T14:00:30+00:00'
    >>> parse_reset("3pm", now).isoformat()
    '2026-11-23T15:00:00+00:00'
    >>> parse_reset("1:15 PM", now).isoformat()  # passed today: tomorrow, by its minute's end
    '2026-11-24T13:15:59+00:00'
    >>> parse_reset("1:55 PM", now).isoformat()  # a moment ago: lifting now
    '2026-11-23T13:55:59+00:00'
    >>> parse_reset("4pm (Europe/Berlin)", now).isoformat()
    '2026-11-23T16:00:00+01:00'
    >>> parse_reset("2026-11-23T14:30:00Z", now).isoformat()
    '2026-11-23T14:30:00+00:00'
    >>> parse_reset("later", now) is None
    True
    """
    text = text.strip()
    iso = _ISO.search(text)
    if iso:
        stamp = iso.group(0).replace("Z", "+00:00")
        try:
            when = dt.datetime.fromisoformat(stamp)
        except ValueError:
            when = None
        if when is not None:
            return when if when.tzinfo else when.replace(tzinfo=now.tzinfo or dt.UTC)
    clock = _CLOCK.search(text)
    if clock and (clock.group("ampm") or clock.group("m")):
        return _next_clock(clock, _zone(text, now), now)
    seconds = _duration(text)
    if seconds is not None:
        return now + dt.timedelta(seconds=seconds)
    if clock:
        return _next_clock(clock, _zone(text, now), now)
    return None


def _next_clock(m: re.Match[str], zone: dt.tzinfo, now: dt.datetime) -> dt.datetime | None:
    hour = int(m.group("h"))
    ampm = (m.group("ampm") or "").lower().replace(".", "")
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23:
        return None
    minute, second = int(m.group("m") or 0), int(m.group("s") or 0)
    if minute > 59 or second > 59:
        return None
    local_now = now.astimezone(zone)
    when = local_now.replace(hour=hour, minute=minute, second=second, microsecond=0)
    if m.group("m") and not m.group("s"):
        # "2:00 PM" is shown rounded down: the limit lifts by the end of that minute.
        when += dt.timedelta(seconds=59)
    if when <= local_now - _GRACE:
        when += dt.timedelta(days=1)
    return when


def reset_in_words(at: float, now: float) -> str:
    """``at`` (epoch seconds) as a short local time and a distance, for events.

    Examples
    --------
    >>> reset_in_words(90.0, 0.0).endswith("(in 90s)")
    True
    >>> reset_in_words(7200.0, 0.0).endswith("(in 2h00m)")
    True
    """
    left = max(0, round(at - now))
    when = time_of_day(at)
    if left >= 3600:
        return f"{when} (in {left // 3600}h{left % 3600 // 60:02d}m)"
    if left >= 120:
        return f"{when} (in {left // 60}m{left % 60:02d}s)"
    return f"{when} (in {left}s)"


def reset_time(profile: AgentProfile, text: str, now: float | None = None) -> float | None:
    """When the limit shown in ``text`` resets (epoch seconds); None when it does not say.

    The last match of the profile's ``detectors.limit_reset`` regexes counts (the newest
    message on the screen).
    """
    found, at = "", -1
    for pat in profile.detectors.limit_reset:
        for m in re.finditer(pat, text, re.MULTILINE):
            if m.start() >= at:
                at, found = m.start(), m.group("reset") or ""
    if not found:
        return None
    stamp = time.time() if now is None else now
    when = parse_reset(found, dt.datetime.fromtimestamp(stamp).astimezone())
    return when.timestamp() if when is not None else None


def limit_region(profile: AgentProfile, snap: Snapshot) -> str:
    """The screen text the ``limited`` detectors search (``limit_region_lines``)."""
    return profile.region(snap, profile.detectors.limit_region_lines)


def limit_lines(profile: AgentProfile, snap: Snapshot) -> int:
    """How many lines of the limit region show a limit message."""
    patterns = tuple(profile.detectors.limited)
    if not patterns:
        return 0
    shows = shows_any(patterns)  # each distinct line is searched once
    return sum(map(shows, limit_region(profile, snap).splitlines()))
