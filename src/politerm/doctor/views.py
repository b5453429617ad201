"""Doctor checks of what the views need: ``poli web``, ``poli dash`` and desktop notices.

Each is a ``WARN`` at worst: driving agents works without any view, so a machine that lacks
one must not fail ``poli doctor``; but the row says which command cannot work and how to
fix it, instead of an "all is well" that ``poli web`` then contradicts. Chromium is checked
only where it is used: in a checkout with the test tools (the browser tests), never for an
installed politerm, whose pages the user's own browser shows.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import typing as t
from pathlib import Path

from politerm.doctor import CheckResult, Status

if t.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from politerm.doctor import DoctorContext

_CHROMIUM = "/usr/bin/chromium"


def web_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """``poli web``: xterm.js and the fonts its pages load are where it looks."""
    from politerm.errors import WebAssetsMissing
    from politerm.ui.web import assets

    try:
        found = assets.node_modules(ctx.env)
    except WebAssetsMissing:
        looked = ", ".join(map(str, assets.candidates(ctx.env)))
        detail = f"cannot start: xterm.js and its fonts are not in {looked}"
        return [CheckResult("poli web", Status.WARN, detail, assets.how_to_install(ctx.env))]
    return [CheckResult("poli web", Status.OK, f"xterm.js and its fonts in {found}")]


def dash_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """``poli dash``: Textual, and a terminal it can draw in."""
    try:
        textual = importlib.metadata.version("textual")
    except importlib.metadata.PackageNotFoundError:
        detail = "cannot start: textual is not installed"
        return [CheckResult("poli dash", Status.WARN, detail, "pip install 'textual>=0.80'")]
    term = ctx.env.get("TERM", "")
    if term in ("", "dumb"):
        detail = f"textual {textual}; TERM is {term or 'unset'}: poli dash needs a real terminal"
        fix = "run poli dash in a terminal emulator or tmux (TERM=xterm-256color or tmux-256color)"
        return [CheckResult("poli dash", Status.WARN, detail, fix)]
    return [CheckResult("poli dash", Status.OK, f"textual {textual}, TERM={term}")]


def session_bus(env: Mapping[str, str]) -> str | None:
    """Why there is no desktop session bus for ``notify-send`` to reach, or None if there is.

    As libnotify finds it: ``DBUS_SESSION_BUS_ADDRESS``, else ``$XDG_RUNTIME_DIR/bus``, else
    autolaunch on an X display. An address this cannot look at (abstract, tcp) counts as a bus.

    Examples
    --------
    >>> session_bus({"DISPLAY": ":0"}) is None
    True
    >>> session_bus({"DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"})
    'DBUS_SESSION_BUS_ADDRESS names /nonexistent/bus, which does not exist'
    >>> session_bus({"XDG_RUNTIME_DIR": "/nonexistent"})
    'no DBUS_SESSION_BUS_ADDRESS, no /nonexistent/bus and no X display'
    """
    address = env.get("DBUS_SESSION_BUS_ADDRESS", "")
    if address:
        for part in address.split(";")[0].removeprefix("unix:").split(","):
            if part.startswith("path="):
                path = part.removeprefix("path=")
                if not os.path.exists(path):  # noqa: PTH110 (a path from a bus address)
                    return f"DBUS_SESSION_BUS_ADDRESS names {path}, which does not exist"
        return None
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and (Path(runtime) / "bus").exists():
        return None
    if env.get("DISPLAY"):
        return None
    where = f"no {Path(runtime) / 'bus'}" if runtime else "no XDG_RUNTIME_DIR"
    return f"no DBUS_SESSION_BUS_ADDRESS, {where} and no X display"


def notice_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Desktop notices (``[notify] desktop``, which poli web and poli notify send)."""
    name, config = "desktop notices", ctx.config()
    if config is not None and not config.notify.desktop:
        return [CheckResult(name, Status.OK, "off ([notify] desktop = false)")]
    off = "desktop notices will not show; the ntfy topics and the webhook still go"
    if shutil.which("notify-send", path=ctx.path) is None:
        fix = "apt-get install libnotify-bin, or set [notify] desktop = false"
        return [CheckResult(name, Status.WARN, f"notify-send is not installed: {off}", fix)]
    why = session_bus(ctx.env)
    if why is not None:
        fix = (
            "set [notify] desktop = false on a machine without a desktop; use [notify] ntfy or "
            "webhook to reach a phone"
        )
        return [CheckResult(name, Status.WARN, f"no desktop session bus ({why}): {off}", fix)]
    return [CheckResult(name, Status.OK, "notify-send and a session bus")]


def browser_rows(ctx: DoctorContext) -> Iterable[CheckResult]:
    """Chromium, only in a checkout with the test tools (the browser tests drive it)."""
    from politerm.ui.web.assets import in_checkout

    if not in_checkout() or importlib.util.find_spec("playwright") is None:
        return []
    found = shutil.which("chromium", path=ctx.path) or (
        _CHROMIUM if Path(_CHROMIUM).exists() else None
    )
    if found is None:
        detail = "chromium is not installed: the web tests fail"
        fix = "apt-get install chromium (scripts/test does)"
        return [CheckResult("browser tests", Status.WARN, detail, fix)]
    return [CheckResult("browser tests", Status.OK, f"chromium at {found}")]
