"""``poli go``: burn an epic down, one scoped agent session per ready work item.

For each ready item: build the layered prompt, ask for confirmation (unless told not to), run
one session (a PTY with the live view by default, or a tmux pane), read its fenced report,
record it, and close the item, park it as needing help (never retried automatically) or give
it back after a failure. When nothing is ready any more, the omnibus summary is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import hashlib
import pathlib
import re
import signal
import subprocess
import sys
import time
import typing as t
import uuid

from politerm._internal.private import RedactedFile
from politerm.agents.bundled import FAKE_AGENT_MODULE
from politerm.agents.profile import load_profile
from politerm.driver import AgentDriver, Host
from politerm.driver.limits import driver_settings
from politerm.driver.stop import StopControl
from politerm.epic.items import pick_source
from politerm.epic.prompt import item_prompt, operator_note
from politerm.epic.session import SessionOutcome, run_session, transcript_header
from politerm.epic.summary import summarize
from politerm.errors import EpicError
from politerm.protocol.parser import clean_line
from politerm.redact import Redactor, install_log_redaction
from politerm.store.epics import (
    EpicStore,
    RecordKind,
    SessionRecord,
    SessionStatus,
    WorkItem,
)

if t.TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from politerm.agents.profile import AgentProfile
    from politerm.config import Config
    from politerm.epic.items import WorkSource
    from politerm.protocol.report import Report
    from politerm.store import RunStore

TMUX_SESSION = "poli-go"


class Choice(str, enum.Enum):
    """An operator's answer to "run this session?"."""

    RUN = "run"
    SKIP = "skip"
    QUIT = "quit"


@dataclasses.dataclass
class GoOptions:
    """What ``poli go`` was asked to do."""

    epic: str
    agent: str | None = None
    tee: pathlib.Path | None = None
    resume: str | None = None
    interactive: bool = True
    dry_run: bool = False
    yes: bool = False
    summary: bool = True
    tmux: bool = False
    chunk_chars: int | None = None


@dataclasses.dataclass
class GoResult:
    """What a run did."""

    run_id: str | None
    records: list[SessionRecord] = dataclasses.field(default_factory=list)
    state: str = "done"
    summary: SessionRecord | None = None
    previews: list[tuple[WorkItem, str]] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 all went through, 1 a session failed, 130 stopped or aborted by the operator."""
        if self.state in ("stopped", "aborted"):
            return 130
        bad = (SessionStatus.ERROR.value, SessionStatus.ABORTED.value)
        return 1 if any(r.status in bad for r in self.records) else 0


def config_hash(config: Config) -> str:
    """A short stable hash of the effective configuration, recorded with each session."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]


def model_of(argv: t.Sequence[str]) -> str | None:
    """The model an agent command line asks for (``--model X``, ``--model=X``, ``-m X``).

    A Python interpreter's own ``-m MODULE`` names the program, not a model.

    Examples
    --------
    >>> model_of(["codex", "--model", "o4-mini"]), model_of(["claude", "--model=opus"])
    ('o4-mini', 'opus')
    >>> model_of(["aider"]) is None, model_of(["python3", "-m", "politerm.testing.fakeagent"])
    (True, None)
    >>> model_of(["/usr/bin/python3.11", "-m", "agent", "-m", "gpt-5"])
    'gpt-5'
    """
    args = list(argv)
    if args and re.fullmatch(r"python[\d.]*", pathlib.PurePath(args[0]).name):
        args = args[args.index("-m") + 2 :] if "-m" in args else args
    for i, arg in enumerate(args):
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
        if arg in ("--model", "-m") and i + 1 < len(args):
            return args[i + 1]
    return None


def agent_version(program: str) -> str | None:
    """The first line ``PROGRAM --version`` prints, or None when it fails."""
    try:
        proc = subprocess.run(
            [program, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (proc.stdout or proc.stderr).strip().splitlines()
    return out[0][:200] if proc.returncode == 0 and out else None


class EpicRunner:
    """Runs ``poli go`` (and ``poli summarize``) against one config and run store.

    Parameters
    ----------
    config
        Epic section, redaction patterns, timeouts, tmux settings.
    store
        The run store (schema 3+).
    options
        What was asked.
    cwd
        Where the agent works (its repository root is found from here).
    say
        Prints one line for the operator.
    confirm
        Asks whether to run an item's session; not called with ``yes``.
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        options: GoOptions,
        *,
        cwd: pathlib.Path,
        say: Callable[[str], None],
        confirm: Callable[[WorkItem, str], Choice] | None = None,
    ) -> None:
        from politerm.epic.items import repo_root

        self.config = config
        self.options = options
        self.redactor = Redactor(config.redact.patterns)
        self.store = store
        self.epics = EpicStore(store, self.redactor)
        self.repo = repo_root(cwd)
        self.say = say
        self.confirm = confirm
        self.stop = StopControl()
        self.agent = options.agent or config.epic.agent
        self.profile: AgentProfile = load_profile(self.agent)
        argv = config.epic.commands.get(self.agent) or list(self.profile.command)
        if FAKE_AGENT_MODULE in argv and "--scenario" not in argv:
            argv = [*argv, "--scenario", "epic-items"]  # it answers each item with a report
        if not argv:
            msg = f"agent profile {self.agent!r} has no command; set [epic.commands] {self.agent}"
            raise EpicError(msg)
        self.argv: list[str] = list(argv)
        self.hash = config_hash(config)
        self._host: Host | None = None  # the poli-go session, with --tmux
        self._version: str | None = None
        self._state = ""
        self._item = ""
        self._since = time.monotonic()
        self._redraw: Callable[[], None] | None = None

    # --- the run --------------------------------------------------------------------------

    async def go(self) -> GoResult:
        """Work through the epic's ready items; then summarize."""
        opts = self.options
        restore_logs = install_log_redaction(self.redactor)
        try:
            source = pick_source(self.config.epic, self.epics, self.repo)
            unknown_run = opts.resume and self.epics.get_run(opts.resume) is None
            if (
                not unknown_run  # that error says more; _run raises it
                and source.name == "builtin"
                and not self.epics.list_items(opts.epic)
            ):
                msg = (
                    f"no epic {opts.epic!r} in the work queue of {self.epics.store.path}: "
                    f'add items with `poli work add {opts.epic} "TITLE"`'
                )
                raise EpicError(msg)
            if opts.dry_run:
                return self._preview(source)
            async with self._signals():
                return await self._run(source)
        finally:
            restore_logs()
            await self._close_tmux()

    def _preview(self, source: WorkSource) -> GoResult:
        result = GoResult(run_id=None, state="dry-run")
        title, description = source.epic_info(self.options.epic)
        for item in source.ready(self.options.epic):
            prompt = self._prompt(item, "<SESSION_UUID>", title, description)
            result.previews.append((item, prompt))
        return result

    def _prompt(self, item: WorkItem, sid: str, title: str, description: str) -> str:
        return item_prompt(
            self.config.epic,
            item=item,
            session_uuid=sid,
            repo_root=str(self.repo),
            epic_title=title,
            epic_description=description,
        )

    async def _run(self, source: WorkSource) -> GoResult:
        opts = self.options
        epic = opts.epic
        finished: set[str] = set()
        # Read the source before a run exists: a source that cannot be read starts nothing.
        title, description = source.epic_info(epic)
        source.ready(epic)
        if opts.resume:
            run = self.epics.get_run(opts.resume)
            if run is None:
                msg = f"no run {opts.resume!r} to resume (see `poli log`)"
                raise EpicError(msg)
            if run.epic != epic:
                msg = f"run {run.id} was for epic {run.epic!r}, not {epic!r}"
                raise EpicError(msg)
            run_id = run.id
            for r in self.epics.list_records(run_id=run_id, kind=RecordKind.SESSION):
                if r.item_id and SessionStatus(r.status).finished:
                    finished.add(r.item_id)
            self.epics.set_run_state(run_id, "running", finished=False)
            self.say(f"resuming run {run_id}: {len(finished)} item(s) already finished")
        else:
            run_id = uuid.uuid4().hex[:12]
            self.epics.create_run(
                run_id,
                epic=epic,
                repo_root=str(self.repo),
                source=source.name,
                agent=self.agent,
                config_hash=self.hash,
            )
            self.say(f"run {run_id}: epic {epic}, agent {self.agent}, items from {source.name}")
        result = GoResult(run_id=run_id)
        tried: set[str] = set()
        while True:
            ready = [i for i in source.ready(epic) if i.id not in finished and i.id not in tried]
            if not ready:
                break
            item = ready[0]
            tried.add(item.id)
            sid = str(uuid.uuid4())
            prompt = self._prompt(item, sid, title, description)
            if not opts.yes and self.confirm is not None:
                choice = self.confirm(item, prompt)
                if choice is Choice.QUIT:
                    result.state = "stopped"
                    break
                if choice is Choice.SKIP:
                    self.say(f"{item.id}: skipped")
                    continue
            record = await self._item_session(source, run_id, item, sid, prompt)
            result.records.append(record)
            if self.stop.level:
                result.state = "aborted" if self.stop.aborted else "stopped"
                break
        self.epics.set_run_state(run_id, result.state)
        if result.state == "done" and opts.summary:
            if self.epics.list_records(epic=epic, kind=RecordKind.SESSION):
                result.summary = await self.summarize(run_id=run_id)
            else:
                self.say(f"epic {epic}: nothing ready and nothing done; no summary")
        return result

    async def _item_session(
        self, source: WorkSource, run_id: str, item: WorkItem, sid: str, prompt: str
    ) -> SessionRecord:
        transcript = self._transcript(run_id, sid, item.id)
        record = SessionRecord(
            id=sid,
            kind=RecordKind.SESSION.value,
            epic=item.epic,
            status=SessionStatus.QUEUED.value,
            queued=time.time(),
            run_id=run_id,
            repo_root=str(self.repo),
            item_id=item.id,
            agent_binary=self.argv[0],
            agent_version=self._agent_version(),
            model=model_of(self.argv),
            flags=tuple(self.argv[1:]),
            transcript_path=str(transcript.path) if transcript else None,
            config_hash=self.hash,
        )
        self.epics.add_record(record)
        source.claim(item)
        self.say(f"{item.id}: {item.title} (session {sid})")
        self.epics.update_record(sid, status=SessionStatus.RUNNING.value, started=time.time())
        try:
            outcome = await self._session(prompt, sid, item.id, transcript)
        except BaseException as exc:
            # No PTY, tmux gone, a store error: the record and the item must not stay "running".
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.epics.update_record(
                sid, status=SessionStatus.ERROR.value, finished=time.time(), error=why
            )
            source.release(item, why)
            raise
        finally:
            if transcript is not None:
                transcript.close()
        return self._finish_item(source, item, sid, outcome, transcript)

    def _finish_item(
        self,
        source: WorkSource,
        item: WorkItem,
        sid: str,
        outcome: SessionOutcome,
        transcript: RedactedFile | None,
    ) -> SessionRecord:
        report = outcome.report
        texts = [outcome.error or ""]
        if report is not None:
            texts += [report.commit_msg, report.details, report.escalation or ""]
        hits = sum(self.redactor.scan(x).count for x in texts)
        hits += transcript.redactions if transcript else 0
        record = self.epics.update_record(
            sid,
            status=outcome.status.value,
            started=outcome.started,
            finished=outcome.finished,
            commit_summary=report.commit_msg if report else None,
            commit_body=report.details if report else None,
            escalation=report.escalation if report else None,
            error=outcome.error,
            drift=report.drift if report else (),
            redaction=f"redacted ({hits})" if hits else "clean",
        )
        if outcome.status is SessionStatus.SUCCESS and report is not None:
            source.close(item, report.commit_msg)
            self.say(f"{item.id}: success: {record.commit_summary}")
        elif outcome.status is SessionStatus.NEEDS_HELP:
            source.needs_help(item, record.escalation or "")
            self.say(f"{item.id}: needs help: {record.escalation} (not retried)")
        else:
            source.release(item, record.error or outcome.status.value)
            self.say(f"{item.id}: {outcome.status.value}: {record.error}")
        for line in record.drift:
            self.say(f"{item.id}: drift: {line}")
        return record

    def _agent_version(self) -> str | None:
        if self._version is None:
            self._version = agent_version(self.argv[0]) or ""
        return self._version or None

    def _transcript(
        self, run_id: str, sid: str, item: str, *, file_id: str | None = None
    ) -> RedactedFile | None:
        if self.options.tee is not None:
            path = self.options.tee
        elif self.config.epic.transcripts:
            base = self.config.store.resolved_path().parent / "transcripts" / run_id
            path = base / f"{file_id or sid}.log"
        else:
            return None
        header = transcript_header(sid, item)
        return RedactedFile(
            path, self.redactor, clean=clean_line, header=header, max_line=65536, lines_only=True
        )

    # --- sessions -------------------------------------------------------------------------

    async def _session(
        self, prompt: str, sid: str, label: str, transcript: RedactedFile | None
    ) -> SessionOutcome:
        self._item, self._since = label, time.monotonic()
        driver = await self._start(label, sid)
        remove = driver.output(transcript.write) if transcript is not None else None
        try:
            view = None
            if self.options.interactive and sys.stdin.isatty():
                view = driver.live_view(fields=self._fields, on_interrupt=self.stop.request)
            if view is None:
                return await self._run_session(driver, prompt, sid)
            async with view:
                self._redraw = view.draw_status
                try:
                    return await self._run_session(driver, prompt, sid)
                finally:
                    self._redraw = None
        finally:
            if remove is not None:
                remove()
            with contextlib.suppress(Exception):
                await driver.kill(grace=2.0)

    async def _run_session(self, driver: AgentDriver, prompt: str, sid: str) -> SessionOutcome:
        return await run_session(
            driver,
            prompt=prompt,
            session_id=sid,
            timeout=self.config.epic.session_timeout,
            grace=self.config.epic.grace,
            ready_timeout=self.config.timeouts.ready,
            stop=self.stop,
            note=operator_note(sid),
            on_state=self._on_state,
        )

    def _on_state(self, state: str) -> None:
        self._state = state
        if self._redraw is not None:
            self._redraw()
        if not (self.options.interactive and not self.options.tmux and sys.stdin.isatty()):
            self.say(f"{self._item}: {state}")

    def _fields(self) -> list[str]:
        spent = int(time.monotonic() - self._since)
        stop = " (stopping)" if self.stop.level else ""
        return [
            f"poli go {self.options.epic}",
            f"item {self._item}",
            self._state + stop,
            f"{spent // 60}:{spent % 60:02d}",
        ]

    async def _start(self, label: str, sid: str) -> AgentDriver:
        """The session's agent, started (not yet ready) in a PTY or a tmux window."""
        size = (self.config.epic.width, self.config.epic.height)
        if self.options.tmux and self._host is None:
            self._host = Host.of(self.config, TMUX_SESSION)
            # The session's first window holds it open between the sessions' windows.
            idle = [sys.executable, "-c", "import signal; signal.pause()"]
            await self._host.ensure(argv=idle)
        driver = await AgentDriver.start(
            f"epic.{sid[:8]}",
            self.profile,
            argv=self.argv,
            host=self._host,
            window=label[:30],
            cwd=self.repo,
            setting=f"epic.commands.{self.agent}",
            ready_timeout=None,
            size=size,
            # The agent's own hooks report beside the store (the screen decides without them).
            hooks_dir=self.store.path.parent / "hooks" / "epic",
            store=self.store,
            **driver_settings(self.config),
        )
        if self._host is not None:
            socket = self.config.tmux.socket
            self.say(
                f"{label}: in tmux pane {driver.terminal_name} "
                f"(tmux -L {socket} attach -t {TMUX_SESSION})"
            )
        return driver

    async def _close_tmux(self) -> None:
        if self._host is not None:
            with contextlib.suppress(Exception):
                await self._host.kill()
            await self._host.close()
            self._host = None

    @contextlib.asynccontextmanager
    async def _signals(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig, handler in (
            (signal.SIGINT, self.stop.request),
            (signal.SIGTERM, self.stop.abort),
            (signal.SIGHUP, self.stop.abort),
        ):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.add_signal_handler(sig, handler)
                installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    # --- the summary ----------------------------------------------------------------------

    async def summarize(self, *, run_id: str | None = None) -> SessionRecord:
        """Write the omnibus summary of the epic (newest records first) and record it."""
        epic = self.options.epic
        records = self.epics.list_records(epic=epic, kind=RecordKind.SESSION, newest_first=True)
        limit = self.options.chunk_chars or self.config.epic.summary_chunk_chars
        queued = time.time()
        sid = str(uuid.uuid4())
        reported = sum(1 for r in records if r.commit_summary)
        without = len(records) - reported
        self.say(
            f"epic {epic}: summarizing {reported} record(s) with a report"
            + (f" ({without} without one left out)" if without else "")
        )
        # Every summarizer session of this summary writes to one transcript, the record's.
        path: pathlib.Path | None = None

        async def one(prompt: str, session_id: str) -> Report:
            nonlocal path
            transcript = self._transcript(
                run_id or "summaries", session_id, f"{epic}:summary", file_id=sid
            )
            path = transcript.path if transcript is not None else None
            try:
                outcome = await self._session(prompt, session_id, "summary", transcript)
            finally:
                if transcript is not None:
                    transcript.close()
            if outcome.report is None:
                msg = f"summarizer session {session_id} failed: {outcome.error}"
                raise EpicError(msg)
            return outcome.report

        plan = await summarize(epic, records, limit=limit, run=one, config=self.config.epic)
        record = SessionRecord(
            id=sid,
            kind=RecordKind.SUMMARY.value,
            epic=epic,
            status=SessionStatus.SUCCESS.value,
            queued=queued,
            run_id=run_id,
            repo_root=str(self.repo),
            agent_binary=self.argv[0],
            agent_version=self._agent_version(),
            model=model_of(self.argv),
            flags=tuple(self.argv[1:]),
            transcript_path=str(path) if path is not None else None,
            commit_summary=plan.report.commit_msg,
            commit_body=plan.report.details,
            started=queued,
            finished=time.time(),
            config_hash=self.hash,
        )
        self.epics.add_record(record)
        stored = self.epics.get_record(sid)
        assert stored is not None
        self.say(f"epic {epic}: summary ({plan.sessions} summarizer session(s))")
        return stored
