"""Tell a person when they are needed: desktop notifications, a webhook, ntfy topics.

The source is the run store's event log, followed by store-change events (no polling): an
approval asked, a question, a gate waiting, a task done or failed, an agent STUCK or
LIMITED. ``[notify]`` chooses the channels and the events; a rate limit (a burst, then one
per ``min_interval`` for each kind and agent) keeps a flapping agent from flooding anyone.
Each notification carries a link to the web monitor when one runs. Texts are redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import time
import typing as t

import httpx

from politerm.errors import NotifyError
from politerm.redact import Redactor
from politerm.store.watch import EventCursor, StoreWatch
from politerm.ui.overview import printable

if t.TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from politerm.config import NotifyConfig
    from politerm.store import RunStore
    from politerm.store.models import Event

log = logging.getLogger(__name__)

_TITLES = {
    "approval": "approval needed",
    "question": "question asked",
    "gate": "gate waiting",
    "done": "task done",
    "failed": "task failed",
    "stuck": "agent STUCK",
    "limited": "agent LIMITED",
}
_URGENT = frozenset({"approval", "question", "gate", "stuck", "limited", "failed"})


@dataclasses.dataclass(frozen=True)
class Notice:
    """One thing to tell: what, about whom, the detail, and where to look."""

    kind: str
    title: str
    body: str
    agent: str | None
    task: str | None
    event_id: int
    link: str | None = None

    def as_json(self) -> dict[str, t.Any]:
        """The webhook's payload."""
        return dataclasses.asdict(self)


def notice_kind(event: Event) -> str | None:
    """Which notification an event is, if any.

    Examples
    --------
    >>> from politerm.store.models import Event
    >>> notice_kind(Event(1, 0.0, "approval-asked", None, "EXECUTER", "", {}))
    'approval'
    >>> notice_kind(Event(2, 0.0, "block", "t1", "PLANNER", "", {"type": "question"}))
    'question'
    >>> notice_kind(Event(3, 0.0, "block", "t1", "PLANNER", "", {"type": "plan"})) is None
    True
    """
    kind = event.kind
    if kind == "approval-asked":
        return "approval"
    if kind == "block":
        return "question" if event.data.get("type") == "question" else None
    if kind in ("question", "gate", "done", "failed", "stuck", "limited"):
        return kind
    if kind == "pipeline.done":
        return "done"
    if kind == "pipeline.failed":
        return "failed"
    return None


class RateLimit:
    """A burst of ``burst`` notices, then at most one per ``interval`` per key.

    Examples
    --------
    >>> r = RateLimit(interval=60, burst=2)
    >>> [r.allow("stuck:A", now=0), r.allow("stuck:A", now=1), r.allow("stuck:B", now=2)]
    [True, False, True]
    >>> r.allow("gate:x", now=3), r.allow("stuck:A", now=62)
    (False, True)
    """

    def __init__(self, interval: float, burst: int) -> None:
        self.interval = interval
        self.burst = burst
        self._last: dict[str, float] = {}
        self._sent: list[float] = []
        self.suppressed = 0

    def allow(self, key: str, *, now: float) -> bool:
        """Whether a notice for ``key`` may go out at ``now`` (and count it if so)."""
        last = self._last.get(key)
        self._sent = [s for s in self._sent if now - s < self.interval]
        if (last is not None and now - last < self.interval) or len(self._sent) >= self.burst:
            self.suppressed += 1
            return False
        self._last[key] = now
        self._sent.append(now)
        return True


class Notifier:
    """Sends notices for new store events on the channels ``[notify]`` names.

    Parameters
    ----------
    config
        The ``[notify]`` section.
    store
        The run store whose events are followed.
    link
        The web monitor's address, added to every notice.
    """

    def __init__(
        self,
        config: NotifyConfig,
        store: RunStore,
        *,
        link: str | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.link = link
        self.redactor = redactor or store.redactor  # the built-in and the config's patterns
        self.limit = RateLimit(config.min_interval, config.burst)
        self.sent: list[Notice] = []
        self.errors: list[str] = []
        # Set when notify-send found no desktop session bus: said once, then not tried again.
        self.desktop_off: str | None = None
        self._cursor = EventCursor(store)

    # --- what to send ---------------------------------------------------------------------

    def notice(self, event: Event) -> Notice | None:
        """The notice for ``event``, or None when it is not one to send."""
        kind = notice_kind(event)
        if kind is None or kind not in self.config.events:
            return None
        who = event.agent or event.task_id or ""
        title = f"poli: {_TITLES[kind]}" + (f" ({who})" if who else "")
        # A question block's event says only who asked; the question is its body.
        text = str(event.data.get("body") or event.detail) if kind == "question" else event.detail
        body = printable(self.redactor.redact(" ".join(text.split())))[:500]
        return Notice(kind, title, body, event.agent, event.task_id, event.id, self.link)

    # --- following the store ---------------------------------------------------------------

    def skip_past(self) -> None:
        """Start after the newest event: what happened before is not news."""
        self._cursor = EventCursor(self.store)

    async def check(self) -> list[Notice]:
        """Send notices for the events added since the last check; returns those sent."""
        out = []
        for event in self._cursor.read():
            notice = self.notice(event)
            if notice is None:
                continue
            key = f"{notice.kind}:{notice.agent or notice.task or ''}"
            if not self.limit.allow(key, now=time.monotonic()):
                continue
            await self.send(notice)
            out.append(notice)
        return out

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Notifier]:
        """Follow the store's events while the ``async with`` body runs."""
        async with StoreWatch(self.store.path) as watch:
            self.skip_past()

            async def follow() -> None:
                while True:
                    changed = watch.event()
                    try:
                        await self.check()
                    except Exception:
                        log.exception("sending notifications failed")
                    await changed.wait()

            task = asyncio.create_task(follow(), name="poli-notify")
            try:
                yield self
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # --- channels --------------------------------------------------------------------------

    async def send(self, notice: Notice) -> None:
        """Send ``notice`` on every configured channel; a failing channel is logged."""
        self.sent.append(notice)
        for channel in (self._desktop, self._webhook, self._ntfy):
            try:
                await channel(notice)
            except NotifyError as exc:
                self.errors.append(str(exc))
                log.warning("%s", exc)

    async def _desktop(self, notice: Notice) -> None:
        exe = shutil.which("notify-send") if self.config.desktop else None
        if exe is None or self.desktop_off is not None:
            return
        urgency = "critical" if notice.kind in _URGENT else "normal"
        body = notice.body + (f"\n{notice.link}" if notice.link else "")
        proc = await asyncio.create_subprocess_exec(
            exe, "--app-name=politerm", f"--urgency={urgency}", "--", notice.title, body,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 10)
        except TimeoutError:
            proc.kill()
            msg = "notify-send did not finish within 10s"
            raise NotifyError(msg) from None
        if proc.returncode:
            said = " ".join(err.decode(errors="replace").split())
            if _no_bus(said):
                # A machine without a desktop (ssh, CI, a server) stays without one: every
                # later notice would fail the same way, so say it once and stop trying.
                self.desktop_off = said
                msg = f"desktop notifications are off: no desktop session bus ({said})"
                raise NotifyError(msg)
            msg = f"notify-send failed: {said}"
            raise NotifyError(msg)

    async def _post(self, url: str, **kwargs: t.Any) -> None:
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                response = await client.post(url, **kwargs)
        except httpx.HTTPError as exc:
            msg = f"notification to {_safe_url(url)} failed: {exc.__class__.__name__}"
            raise NotifyError(msg) from None
        if response.status_code >= 400:
            msg = f"notification to {_safe_url(url)} refused: HTTP {response.status_code}"
            raise NotifyError(msg)

    async def _webhook(self, notice: Notice) -> None:
        if self.config.webhook:
            await self._post(self.config.webhook, json=notice.as_json())

    async def _ntfy(self, notice: Notice) -> None:
        headers = {
            "Title": notice.title,
            "Priority": "high" if notice.kind in _URGENT else "default",
            "Tags": notice.kind,
        }
        if notice.link:
            headers["Click"] = notice.link
        # A private topic (a protected ntfy server) takes an access token; it lives in the
        # environment, never in a config file, and goes to the ntfy topics only.
        token = os.environ.get(self.config.ntfy_token_env) if self.config.ntfy else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        for topic in self.config.ntfy:
            await self._post(topic, content=notice.body.encode(), headers=headers)


def _no_bus(said: str) -> bool:
    """Whether notify-send's complaint means there is no desktop session bus to talk to.

    Examples
    --------
    >>> _no_bus("Cannot autolaunch D-Bus without X11 $DISPLAY")
    True
    >>> _no_bus("Could not connect: No such file or directory")
    True
    >>> _no_bus("Invalid urgency")
    False
    """
    low = said.lower()
    return "d-bus" in low or "dbus" in low or low.startswith("could not connect")


def _safe_url(url: str) -> str:
    """``url`` without its query (tokens live there).

    Examples
    --------
    >>> _safe_url("https://hooks.example/x?token=abc")
    'https://hooks.example/x'
    """
    return url.split("?", 1)[0]
