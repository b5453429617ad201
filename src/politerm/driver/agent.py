"""The agent driver: everything about one running agent, on a tmux pane or a PTY.

Every workflow (the Planner⇄Executer router, pipeline steps, epic sessions, ``poli agents
check``, and the manager, bridge, messaging and dashboard built on them) drives its agents
through :class:`AgentDriver` and keeps only its own logic. The driver owns:

- starting the agent (its program checked on PATH before anything is created; a half-started
  agent torn down) or attaching to a running one;
- start-up dialogs and :meth:`~AgentDriver.wait_ready`;
- confirmed delivery (:meth:`~AgentDriver.deliver`), with the input box verified empty first;
- the state tracker (READY, BUSY, WAITING_APPROVAL, STUCK, EXITED) and the approval policy
  (:meth:`~AgentDriver.observe`);
- the block stream of a turn (:meth:`~AgentDriver.read_blocks`) and the fenced-report stream
  (:meth:`~AgentDriver.reports`);
- killing the agent's whole process tree;
- one high-level call, :meth:`~AgentDriver.run_turn`, for workflows that send one prompt and
  wait for its answer (see :mod:`politerm.driver.turn`).

Named hooks (:meth:`~AgentDriver.on`) let tests put a fault at an exact moment of a delivery.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import time
import typing as t

from politerm._internal.aio import wait_event
from politerm.agents.approval import ApprovalPolicy
from politerm.agents.chrome import chrome_top, reply_tail
from politerm.agents.state import AgentState, StateReading
from politerm.agents.tracker import StateTracker
from politerm.driver.approvals import Approver
from politerm.driver.blocks import BlockReader, turn_start
from politerm.driver.delivery import DeliveryResult, Outcome, clear_input, deliver
from politerm.driver.ready import wait_ready
from politerm.errors import (
    AgentNotFound,
    ControlModeError,
    PaneNotFound,
    PtyError,
    StoreError,
)
from politerm.protocol.report import ReportParser
from politerm.pty.runner import PtyTerminal
from politerm.tmux.pane import Pane, new_window

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from politerm.agents.profile import AgentProfile
    from politerm.driver.turn import Expect, TurnResult
    from politerm.protocol.block import Block
    from politerm.protocol.report import ReportSignal
    from politerm.store import RunStore
    from politerm.terminal import Snapshot
    from politerm.tmux.control import ControlClient
    from politerm.tmux.server import TmuxServer

log = logging.getLogger(__name__)

AgentTerm = Pane | PtyTerminal
T = t.TypeVar("T")
# Longest sleep of watch() without output: agent ready (an answer may be silence) / not.
_WATCH_READY = 0.5
_WATCH_BUSY = 2.0
Hook = t.Callable[[], "Awaitable[None]"]
#: Moments of a delivery a hook may be attached to (:meth:`AgentDriver.on`).
HOOK_POINTS = frozenset({"before-paste", "after-confirm"})


@dataclasses.dataclass(frozen=True)
class TmuxPlace:
    """Where :meth:`AgentDriver.start` opens a tmux window: session, window name, size."""

    client: ControlClient
    server: TmuxServer
    session: str
    window: str
    size: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at the agent: the screen, the tracked state, what the approver did."""

    snap: Snapshot
    reading: StateReading
    approval: str = "none"

    @property
    def state(self) -> AgentState:
        """The tracked state."""
        return self.reading.state


def check_program(argv: Sequence[str], env: Mapping[str, str] | None, *, setting: str) -> None:
    """Raise :class:`AgentNotFound` unless ``argv[0]`` can be run.

    ``setting`` names the configuration key that chooses the program, for the message.

    Examples
    --------
    >>> check_program(["sh"], None, setting="agents.X.command")
    >>> check_program(["no-such-agent-cli"], None, setting="agents.PLANNER.command")
    Traceback (most recent call last):
    ...
    politerm.errors.AgentNotFound: cannot start 'no-such-agent-cli': not on PATH; install it or set agents.PLANNER.command
    """  # noqa: E501
    if not argv:
        msg = f"no command to start: set {setting}"
        raise AgentNotFound(msg)
    path = (env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(argv[0], path=path) is None:
        msg = f"cannot start {argv[0]!r}: not on PATH; install it or set {setting}"
        raise AgentNotFound(msg)


class AgentDriver:
    """Drives one running agent TUI.

    Parameters
    ----------
    name
        The agent's name in events and the store (``PLANNER``, ``step-3``, ...).
    profile
        How to read and type into it.
    term
        Its terminal: a tmux :class:`~politerm.tmux.pane.Pane` or a
        :class:`~politerm.pty.PtyTerminal`.
    store
        The run store for events, the agent's state row and pending approvals (optional).
    policy
        The approval policy (default: ask).
    approval_key
        The name ``poli approve`` answers its questions under (default: ``name``).
    cwd, env
        Its working directory (file-referenced bodies, transcripts) and environment.
    """

    def __init__(
        self,
        name: str,
        profile: AgentProfile,
        term: AgentTerm,
        *,
        store: RunStore | None = None,
        policy: ApprovalPolicy | None = None,
        approval_key: str | None = None,
        cwd: pathlib.Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.profile = profile
        self.term = term
        self.store = store
        self.cwd = cwd
        self.env = {**profile.env, **(env or {})}
        self.tracker = StateTracker(profile)
        self.approver = Approver(
            approval_key or name, profile, term, policy or ApprovalPolicy(), store
        )
        self.blocks = BlockReader(name, profile, term, cwd=cwd, env=self.env, store=store)
        self.last_screen: tuple[str, ...] = ()
        self.dead = False
        self._stuck_reported = False
        self._hooks: dict[str, list[Hook]] = {}
        # The last screen looked at, and the output event taken just before looking.
        self._look: tuple[Snapshot, asyncio.Event] | None = None

    def __repr__(self) -> str:
        return f"AgentDriver({self.name}, {self.term.name}, {self.state.value})"

    # --- starting -------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        name: str,
        profile: AgentProfile,
        *,
        argv: Sequence[str] | None = None,
        tmux: TmuxPlace | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        setting: str | None = None,
        ready_timeout: float | None = 60.0,
        size: tuple[int, int] = (200, 50),
        say: Callable[[str], None] | None = None,
        **kwargs: t.Any,
    ) -> AgentDriver:
        """Start an agent in a new tmux window (``tmux``) or a PTY, and wait until ready.

        Parameters
        ----------
        argv
            The command (default: the profile's ``command``).
        tmux
            Where to open the window; None runs the agent in a headless PTY.
        setting
            The configuration key naming the command, for the "not on PATH" message
            (default ``agents.<name>.command``).
        ready_timeout
            Bound on the wait for the ready prompt; None does not wait.
        kwargs
            Passed to the constructor (store, policy, approval_key).

        Raises
        ------
        AgentNotFound
            The program is not on PATH (nothing was created).
        AgentExited, AgentTimeout
            It exited or was not ready in time; it has been killed.
        """
        argv = list(argv if argv is not None else profile.command)
        full_env = {**profile.env, **(env or {})}
        check_program(argv, full_env, setting=setting or f"agents.{name}.command")
        term: AgentTerm
        if tmux is not None:
            term = await new_window(
                tmux.client,
                tmux.server,
                session=tmux.session,
                name=tmux.window,
                argv=argv,
                cwd=cwd,
                env=full_env,
                agent=name,
                size=tmux.size,
            )
        else:
            term = await PtyTerminal.spawn(argv, cwd=cwd, env=full_env, size=size, name=name)
        where = pathlib.Path(cwd).expanduser().resolve() if cwd is not None else None
        driver = cls(name, profile, term, cwd=where, env=env, **kwargs)
        if ready_timeout is None:
            return driver
        try:
            await driver.wait_ready(ready_timeout, say=say)
        except BaseException:
            # A half-started agent is not left behind.
            with contextlib.suppress(Exception):
                await driver.kill(grace=1.0)
            raise
        return driver

    @classmethod
    def attach(cls, name: str, profile: AgentProfile, term: AgentTerm, **kwargs: t.Any) -> t.Self:
        """Drive an agent that already runs in ``term`` (after a restart, say)."""
        return cls(name, profile, term, **kwargs)

    @property
    def pane(self) -> Pane | None:
        """The tmux pane, when the agent runs in one."""
        return self.term if isinstance(self.term, Pane) else None

    # --- hooks ----------------------------------------------------------------------------

    def on(self, point: str, hook: Hook) -> None:
        """Run ``hook`` at a moment of each delivery (tests widen race windows with it).

        ``"before-paste"``: the caller has written its intent (e.g. DELIVERING) and nothing
        is typed yet; ``"after-confirm"``: the prompt is confirmed, the caller has not yet
        recorded it.
        """
        if point not in HOOK_POINTS:
            msg = f"no hook point {point!r}; choose one of {', '.join(sorted(HOOK_POINTS))}"
            raise ValueError(msg)
        self._hooks.setdefault(point, []).append(hook)

    async def _hook(self, point: str) -> None:
        for hook in self._hooks.get(point, ()):
            await hook()

    # --- looking --------------------------------------------------------------------------

    @property
    def state(self) -> AgentState:
        """The tracked state after the last look."""
        return AgentState.EXITED if self.dead else self.tracker.state

    async def snapshot(self) -> Snapshot | None:
        """The screen now; None when the terminal is gone."""
        event = self.term.output_event()
        try:
            snap = await self.term.snapshot()
        except PaneNotFound:
            self._look = None
            return None
        self._look = (snap, event)
        return snap

    def fresh_snapshot(self) -> Snapshot | None:
        """The last screen looked at, if the program printed nothing since; else None.

        The output event is taken before each look, so output that reached tmux after the
        capture has set it: an unset event means the screen is still the one captured.
        """
        if self._look is None:
            return None
        snap, event = self._look
        return None if event.is_set() or not snap.alive else snap

    async def look(self) -> Snapshot | None:
        """:meth:`fresh_snapshot`, or a new snapshot when the screen may have changed."""
        return self.fresh_snapshot() or await self.snapshot()

    async def observe(self, *, task_id: str | None = None) -> Observation:
        """Look once: track the state, answer an approval question by policy, record it.

        A STUCK agent is reported once as a ``stuck`` event; the agent's row in the store
        (if it has one) follows its state.
        """
        snap = await self.snapshot()
        if snap is None:
            from politerm.terminal import Snapshot

            snap = Snapshot(("pane is gone",), alive=False)
        reading = self.tracker.update(snap)
        self.last_screen = snap.lines
        approval = "none"
        if reading.state is AgentState.EXITED:
            self.dead = True
        elif reading.state is AgentState.WAITING_APPROVAL:
            approval = await self.approver.look(snap, task_id=task_id)
        elif self.approver.asked and reading.state is not AgentState.UNKNOWN:
            # A redraw frame (UNKNOWN) is not an answer; a definite other state is.
            self.approver.gone(task_id=task_id)
        self._record(reading, task_id)
        return Observation(snap, reading, approval)

    def _record(self, reading: StateReading, task_id: str | None) -> None:
        if reading.state is AgentState.STUCK and not self._stuck_reported:
            self._stuck_reported = True
            self._event(
                "stuck",
                task_id,
                f"{self.name} is stuck ({reading.rule}): " + " | ".join(reading.evidence),
            )
        elif reading.state is not AgentState.STUCK:
            self._stuck_reported = False
        if self.store is None:
            return
        with contextlib.suppress(StoreError):
            agent = self.store.get_agent(self.name)
            if agent is not None and agent.state != reading.state.value:
                # A display row that the next look rewrites: not worth an fsync on the
                # way from a block to the next agent (the next durable commit covers it).
                with self.store.batch(durable=False):
                    self.store.set_agent_state(self.name, reading.state.value)

    def _event(self, kind: str, task_id: str | None, detail: str) -> None:
        if self.store is not None:
            self.store.add_event(kind, task_id=task_id, agent=self.name, detail=detail)

    async def wait_ready(
        self,
        timeout: float,
        *,
        say: Callable[[str], None] | None = None,
        on_reading: Callable[[StateReading], None] | None = None,
        on_dialog: Callable[[str, tuple[str, ...]], None] | None = None,
    ) -> StateReading:
        """Wait (bounded) until the agent is ready, answering start-up dialogs.

        ``on_reading`` sees each reading taken, ``on_dialog`` each dialog answered (see
        :func:`politerm.driver.ready.wait_ready`).

        Raises
        ------
        AgentExited, AgentTimeout
            The message names the agent, what was awaited and its screen.
        """
        try:
            reading = await wait_ready(
                self.term,
                self.profile,
                timeout=timeout,
                name=self.name,
                say=say,
                on_reading=on_reading,
                on_dialog=on_dialog,
            )
        except PaneNotFound as exc:
            from politerm.errors import AgentExited

            msg = f"agent {self.name} exited while starting: {exc}"
            raise AgentExited(msg) from None
        snap = await self.snapshot()
        if snap is not None:
            self.tracker.update(snap)
        if reading.rule == "quiet":
            # Only silence said so; the tracker cannot see it on one screen.
            self.tracker.state, self.tracker.latched = AgentState.READY, True
            self.tracker.ready_since = time.monotonic()
        if self.store is not None:
            with contextlib.suppress(StoreError):
                if self.store.get_agent(self.name) is not None:
                    self.store.set_agent_state(self.name, AgentState.READY.value)
        return reading

    async def watch(
        self,
        until: Callable[[Observation], T | None],
        *,
        timeout: float,
        what: str,
        task_id: str | None = None,
    ) -> T:
        """Look at the agent on each output (bounded) until ``until(observation)`` is not None.

        Approval questions are answered by the driver's policy on the way (each look is an
        :meth:`observe`); ``until`` sees every observation, the approver's action included.

        Raises
        ------
        AgentExited
            The agent exited first; the message names ``what`` and shows its screen.
        AgentTimeout
            ``timeout`` seconds passed; the message names ``what``, the state and the screen.
        """
        from politerm.errors import AgentExited, AgentTimeout

        deadline = time.monotonic() + timeout
        while True:
            event = self.term.output_event()
            obs = await self.observe(task_id=task_id)
            got = until(obs)
            if got is not None:
                return got
            screen = " | ".join(ln.strip() for ln in obs.snap.lines if ln.strip())[-300:]
            if obs.state is AgentState.EXITED:
                msg = f"agent {self.name} exited while waiting for {what}: {screen}"
                raise AgentExited(msg)
            now = time.monotonic()
            if now >= deadline:
                msg = (
                    f"agent {self.name}: no {what} within {timeout:g}s "
                    f"(it is {obs.state.value}); screen: {screen}"
                )
                raise AgentTimeout(msg)
            # Output ends the wait; the bound covers what silence alone changes.
            bound = _WATCH_READY if obs.state is AgentState.READY else _WATCH_BUSY
            change = self.tracker.next_change()
            if change is not None:
                bound = min(bound, max(0.05, change - now))
            await wait_event(event, min(bound, deadline - now))

    # --- typing ---------------------------------------------------------------------------

    async def deliver(self, text: str | bytes, *, already_pasted: bool = False) -> DeliveryResult:
        """Paste ``text``, submit it and confirm it (see :mod:`politerm.driver.delivery`).

        The input box is verified empty before the paste (cleared with the profile's
        ``clear_input`` keys when it is not); ``already_pasted`` submits the text an earlier
        STRANDED attempt left in the box instead. The tracker's ready latch ends here.
        """
        self.tracker.input_sent()
        await self._hook("before-paste")
        # The empty-box check reads the screen already looked at, when nothing was printed
        # since (one tmux round trip less on the way to the agent).
        snap = self.fresh_snapshot()
        self._look = None
        try:
            result = await deliver(
                self.term, text, self.profile, already_pasted=already_pasted, snap=snap
            )
        except ControlModeError as exc:
            # The connection dropped mid-delivery: nothing is known to be submitted.
            return DeliveryResult(Outcome.STRANDED, (str(exc),), 0, False, 0.0, "tmux dropped")
        except PtyError as exc:
            # The program's terminal closed under us: it exited.
            self.dead = True
            return DeliveryResult(Outcome.AGENT_EXITED, (str(exc),), 0, False, 0.0, "pty closed")
        if result.outcome is Outcome.AGENT_EXITED:
            self.dead = True
        await self._hook("after-confirm")
        return result

    async def clear_input(self) -> bool:
        """Empty the input box (e.g. a dead-lettered prompt left there); True when empty."""
        self._look = None
        snap = await clear_input(self.term, self.profile)
        return snap is not None and not self.profile.input_text(snap)

    async def press(self, *keys: str) -> None:
        """Press named keys (an interrupt, a menu answer)."""
        self._look = None
        await self.term.send_keys(*keys)

    # --- reading --------------------------------------------------------------------------

    def last_words(self, limit: int = 6) -> list[str]:
        """The last lines the agent wrote, above its CLI's input box and footer (for errors)."""
        return reply_tail(self.profile, self.last_screen, limit)

    def turn_start(self, snap: Snapshot) -> int:
        """Where the answer to a prompt sent now begins (see :func:`turn_start`)."""
        start = turn_start(snap)
        if start < 0:
            return start
        # Gemini draws the prompt's echo where its hints and input box were, above the
        # cursor: the answer starts at the top of that chrome.
        return min(start, snap.history_size + chrome_top(self.profile, snap.lines))

    async def read_blocks(
        self, snap: Snapshot, start_line: int, nonce: str | None, *, task_id: str | None = None
    ) -> list[Block]:
        """The turn's blocks seen now (screen, then transcript); see :class:`BlockReader`."""
        return await self.blocks.read(snap, start_line, nonce, task_id=task_id)

    def reports(
        self, session_id: str, *, on_text: Callable[[str], None] | None = None
    ) -> ReportStream:
        """Subscribe to the fenced report ``poli:<session_id>`` in the agent's output."""
        return ReportStream(self.term, session_id, on_text=on_text)

    async def run_turn(
        self, prompt: str | Callable[[str], str], expect: Expect, **kw: t.Any
    ) -> TurnResult:
        """Deliver a prompt and watch until it is answered; see :func:`politerm.driver.turn.run_turn`."""  # noqa: E501
        from politerm.driver.turn import run_turn

        return await run_turn(self, prompt, expect, **kw)

    # --- stopping -------------------------------------------------------------------------

    async def kill(self, *, grace: float = 3.0) -> None:
        """Kill the agent's whole process tree (verified gone); a pane keeps its window."""
        with contextlib.suppress(PaneNotFound, ControlModeError):
            await self.term.kill(grace=grace)
        self.dead = True


class ReportStream:
    """The agent's raw output fed to a :class:`~politerm.protocol.report.ReportParser`.

    Subscribes at construction; :meth:`close` unsubscribes. ``signals`` collects reports and
    report errors as they complete; ``on_text`` (optional) sees the decoded text first (the
    epic transcript writer).
    """

    def __init__(
        self,
        term: AgentTerm,
        session_id: str,
        *,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.parser = ReportParser(session_id)
        self.signals: list[ReportSignal] = []
        self.on_text = on_text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if isinstance(term, Pane):
            self._unsubscribe = term.client.subscribe(
                term.pane_id, lambda _pane, data: self._feed(data)
            )
        else:
            self._unsubscribe = term.subscribe(self._feed)

    def _feed(self, data: bytes) -> None:
        self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        """Feed decoded output (also the decoder's tail at the end)."""
        if self.on_text is not None:
            self.on_text(text)
        self.signals.extend(self.parser.feed(text))

    def flush(self) -> None:
        """Feed what the decoder still holds (the agent exited)."""
        self.feed_text(self._decoder.decode(b"", final=True))

    def close(self) -> None:
        """Stop listening."""
        self._unsubscribe()
