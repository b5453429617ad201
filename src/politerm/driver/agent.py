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
- receipts from the agent's own hooks (:mod:`politerm.driver.receipts`): installed at
  start for CLIs that have them, found again on attach through the pane's ``@poli_hooks``;
  they confirm deliveries, end turns and announce approvals, and the screen cross-checks
  them (a disagreement is recorded as ``drift``);
- killing the agent's whole process tree;
- one high-level call, :meth:`~AgentDriver.run_turn`, for workflows that send one prompt and
  wait for its answer (see :mod:`politerm.driver.turn`).

Named hooks (:meth:`~AgentDriver.on`) let tests put a fault at an exact moment of a delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
import typing as t

from politerm._internal.aio import wait_any
from politerm._internal.proctree import kill_processes, process_tree
from politerm.agents.approval import ApprovalPolicy
from politerm.agents.chrome import chrome_top, reply_tail
from politerm.agents.state import AgentState, StateReading
from politerm.agents.tracker import StateTracker
from politerm.driver.agentrow import AgentRow
from politerm.driver.approvals import Approver
from politerm.driver.blocks import BlockReader, Window, turn_start
from politerm.driver.delivery import DeliveryResult, Outcome, clear_input, deliver
from politerm.driver.journal import TurnLog
from politerm.driver.launch import start
from politerm.driver.limits import Limiter, LimitPolicy
from politerm.driver.looking import Mark, Observation
from politerm.driver.ownword import OwnWord
from politerm.driver.ready import wait_ready
from politerm.driver.receipts import HOOK_GRACE, Drift
from politerm.driver.receiptwatch import cross_check_delivery, hook_approval_open
from politerm.driver.reports import ReportStream, tap
from politerm.driver.tokens import Budget, TokenMeter
from politerm.driver.transcripts import hooked_home
from politerm.driver.turn import run_turn
from politerm.errors import (
    AgentError,
    AgentExited,
    ControlModeError,
    PaneNotFound,
    PromptNotDelivered,
    PtyError,
)

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from politerm.agents.approval import PendingApproval
    from politerm.agents.profile import AgentProfile
    from politerm.agents.question import ApprovalRequest
    from politerm.driver.receipts import Receipts
    from politerm.protocol.block import Block
    from politerm.pty.liveview import LiveView
    from politerm.store import RunStore
    from politerm.store.journal import Serves
    from politerm.terminal import Snapshot, Terminal

T = t.TypeVar("T")
Hook = t.Callable[[], "Awaitable[None]"]
#: Moments of a delivery a hook may be attached to (:meth:`AgentDriver.on`).
HOOK_POINTS = frozenset({"before-paste", "before-submit", "after-confirm"})


class AgentDriver:
    """Drives one running agent TUI: constructed on its terminal, or started by :meth:`start`.

    Parameters
    ----------
    name
        The agent's name in events and the store (``PLANNER``, ``step-3``, ...).
    profile
        How to read and type into it.
    term
        Its terminal (a tmux :class:`~politerm.tmux.pane.Pane`, a
        :class:`~politerm.pty.PtyTerminal`): the driver uses only the :class:`Terminal`
        interface.
    store
        The run store for events, the agent's state row and pending approvals (optional).
    policy
        The approval policy (default: ask).
    approval_key
        The name ``poli approve`` answers its questions under (default: ``name``).
    cwd, env
        Its working directory (file-referenced bodies, transcripts) and environment.
    receipts
        Its hook receipts (default: found through the pane's ``@poli_hooks`` option).
    limits
        What to do when it hits a usage or rate limit (see :mod:`politerm.driver.limits`).
    budget
        Token caps (see :mod:`politerm.driver.tokens`).
    """

    def __init__(
        self,
        name: str,
        profile: AgentProfile,
        term: Terminal,
        *,
        store: RunStore | None = None,
        policy: ApprovalPolicy | None = None,
        approval_key: str | None = None,
        cwd: pathlib.Path | None = None,
        env: Mapping[str, str] | None = None,
        receipts: Receipts | None = None,
        limits: LimitPolicy | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.name = name
        self.profile = profile
        self._term = term
        self.store = store
        self.cwd = cwd
        self.env = {**profile.env, **(env or {})}
        self._tracker = StateTracker(profile)
        self._limiter = Limiter(limits or LimitPolicy())
        self._meter = TokenMeter(name, profile, cwd=cwd, env=self.env, store=store, budget=budget)
        self._approver = Approver(
            approval_key or name, profile, term, policy or ApprovalPolicy(), store
        )
        self._blocks = BlockReader(name, profile, term, cwd=cwd, env=self.env, store=store)
        self._turns = TurnLog(name, store)
        self.last_screen: tuple[str, ...] = ()
        self._dead = False
        self.typing = asyncio.Lock()
        """Held by whoever decides to type into the agent and types (the router's step, a
        message lane): the holder looks again first, so a loop prompt and a message are
        typed one after the other, never into each other."""
        # One look at a time: two concurrent looks could both answer one question.
        self._looking = asyncio.Lock()
        self._row = AgentRow(name, store, profile.transcript, cwd, self._blocks.env)
        self._hooks: dict[str, list[Hook]] = {}
        # The last screen looked at, and the output event taken just before looking.
        self._look: tuple[Snapshot, asyncio.Event] | None = None
        self._word = OwnWord(name, profile, term, cwd, self.env, receipts)
        #: Seconds one source (hook or screen) may lag the other before it counts as drift.
        self.hook_grace = HOOK_GRACE

    def __repr__(self) -> str:
        return f"AgentDriver({self.name}, {self._term.name}, {self.state.value})"

    # --- starting -------------------------------------------------------------------------

    #: Start an agent and wait until it is ready: :func:`politerm.driver.launch.start`.
    start = classmethod(start)

    def host_gone(self) -> str | None:
        """Why the agent's terminal host went away (its tmux server died); None while it is up."""
        return self._term.host_gone()

    async def pid(self) -> int | None:
        """The agent program's process id; None once it has exited (or its terminal is gone)."""
        return await self._term.pid()

    async def stop(self, *, grace: float = 3.0) -> None:
        """Stop the agent's whole process tree; its terminal stays, with its last screen.

        Unlike :meth:`kill`, a pane is kept (dead) for the operator to read, and a process
        that survives SIGKILL is only logged.
        """
        pid = await self.pid()
        if pid is not None:
            procs = process_tree(pid)
            with contextlib.suppress(AgentError):
                await asyncio.to_thread(kill_processes, procs, grace=grace, what=self.name)

    # --- hooks ----------------------------------------------------------------------------

    def on(self, point: str, hook: Hook) -> None:
        """Run ``hook`` at a moment of each delivery (tests widen race windows with it).

        ``"before-paste"``: the caller has written its intent (e.g. DELIVERING) and nothing
        is typed yet; ``"before-submit"``: the text is in the input box, right before each
        press of the submit key (a hook that raises leaves it unsubmitted);
        ``"after-confirm"``: the prompt is confirmed, the caller has not yet recorded it.
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
        return AgentState.EXITED if self._dead else self._tracker.state

    @property
    def dead(self) -> bool:
        """Whether the agent has exited (seen on its screen, or :meth:`mark_exited`)."""
        return self._dead

    def mark_exited(self) -> None:
        """Take the agent as exited (a delivery saw it go); its store row says EXITED."""
        self._dead = True
        self._row.saw(StateReading(AgentState.EXITED), None)
        self.record_row()

    @property
    def reading(self) -> StateReading:
        """The reading of the last look: its state, the rule that decided it, the evidence."""
        return self._tracker.reading

    @property
    def ready_since(self) -> float:
        """When (monotonic) the agent last became READY."""
        return self._tracker.ready_since

    @property
    def busy_seen(self) -> bool:
        """Whether the agent was seen BUSY since the last prompt."""
        return self._tracker.busy_seen

    def next_change(self) -> float | None:
        """When (monotonic) the state may change with no output (STUCK, the ready latch)."""
        return self._tracker.next_change()

    def limit_due_in(self) -> float | None:
        """Seconds until an open usage limit's reset is acted on; None when none is open."""
        return self._limiter.due_in()

    def mark(self) -> Mark:
        """Now, in the agent's output: take it before a look, and :meth:`changed` waits from it."""
        return Mark(self._term.output_event())

    async def changed(
        self, timeout: float, *, since: Mark | None = None, wake: asyncio.Event | None = None
    ) -> bool:
        """Wait until the agent printed, exited or lost its terminal, or ``wake`` is set.

        It counts from ``since`` (a :meth:`mark` taken before the caller's look: a change
        after that look ends the wait at once), else from now; at most ``timeout`` seconds.
        True when the agent changed; False when woken or the bound ran out.
        """
        output = (since or self.mark())._output
        await wait_any(output, *(() if wake is None else (wake,)), timeout=timeout)
        return output.is_set()

    @property
    def terminal_name(self) -> str:
        """Its terminal's name (a tmux pane id, a PTY's name)."""
        return self._term.name

    @property
    def drifts(self) -> tuple[Drift, ...]:
        """Every disagreement between the agent's own events and its screen so far."""
        return tuple(self._row.drifts)

    # --- approvals ------------------------------------------------------------------------

    @property
    def approval_key(self) -> str:
        """The name ``poli approve`` answers this agent's questions under."""
        return self._approver.key

    @property
    def pending_approval(self) -> PendingApproval | None:
        """The question waiting for the user, if any."""
        return self._approver.pending

    @property
    def policy(self) -> ApprovalPolicy:
        """How the agent's questions are answered; may be changed between turns."""
        return self._approver.policy

    @policy.setter
    def policy(self, policy: ApprovalPolicy) -> None:
        self._approver.policy = policy

    @property
    def approvals_answered(self) -> int:
        """How many questions were answered with the policy's keys."""
        return self._approver.answered

    @property
    def last_question(self) -> ApprovalRequest | None:
        """The question last answered, as read (from the history when its box was tall)."""
        return self._approver.last

    async def snapshot(self) -> Snapshot | None:
        """The screen now; None when the terminal is gone."""
        event = self._term.output_event()
        try:
            snap = await self._term.snapshot()
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

    async def ready_look(self) -> Snapshot | None:
        """:meth:`look`, when that screen shows the agent READY; else None.

        For a caller that must know the agent is free right now without taking a look of
        its own loop's (no state tracked, no question answered, nothing recorded).
        """
        snap = await self.look()
        if snap is None or self.profile.detect(snap).state is not AgentState.READY:
            return None
        return snap

    def box_text(self, snap: Snapshot) -> str | None:
        """The text in the agent's input box on ``snap``: "" when empty, None when unseen."""
        return self.profile.input_text(snap)

    async def observe(self, *, task_id: str | None = None, defer_row: bool = False) -> Observation:
        """Look once: track the state, answer an approval question by policy, record it.

        A STUCK agent is reported once as a ``stuck`` event; a LIMITED one is resumed at the
        reset (:class:`~politerm.driver.limits.Limiter`); the agent's store row (if it has
        one) follows its state: at once, or (``defer_row``) at the caller's :meth:`record_row`.
        """
        async with self._looking:
            return await self._observe(task_id, defer_row=defer_row)

    async def _observe(self, task_id: str | None, *, defer_row: bool) -> Observation:
        snap = await self.snapshot()
        if snap is None:
            from politerm.terminal import Snapshot

            snap = Snapshot(("pane is gone",), alive=False)
        reading = self._tracker.update(snap)
        self.last_screen = snap.lines
        hook_approval = await hook_approval_open(self, reading)
        approval = "none"
        lim = self._limiter
        if reading.state is AgentState.LIMITED or lim.active or lim.given_up or not lim.adopted:
            reading = await self._limiter.look(self, reading, task_id)
            self._tracker.force(reading)
        if reading.state is AgentState.EXITED:
            self._dead = True
        elif reading.state is AgentState.WAITING_APPROVAL:
            approval = await self._approver.look(snap, task_id=task_id)
        elif reading.state is not AgentState.UNKNOWN:
            # A redraw frame (UNKNOWN) is not an answer; a definite other state is.
            self._approver.left(task_id=task_id)
        self._row.saw(reading, task_id)
        if not defer_row:
            self.record_row()
        return Observation(snap, reading, approval, hook_approval)

    # --- receipts -------------------------------------------------------------------------

    async def hook_receipts(self) -> Receipts | None:
        """The agent's hook receipts: given, or found through its pane's ``@poli_hooks``."""
        return await self._word.find_receipts()

    def drift(self, drift: Drift, *, key: str | None = None, task_id: str | None = None) -> None:
        """Record that the agent's own event and its screen disagreed (once per ``key``)."""
        self._row.drift(drift, key=key, task_id=task_id)

    def record_row(self) -> None:
        """Bring the agent's row in the store up to the last look (no-op if it is).

        The CLI's own id of its conversation, once its hooks named it (or named a new
        one), is recorded in the journal of turns: ``poli up --resume`` resumes that one.
        """
        self._row.write(self._word.receipts)

    def record(self, kind: str, task_id: str | None, detail: str) -> None:
        """Add an event about this agent to the store (when it has one)."""
        self._row.event(kind, task_id, detail)

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
        :func:`politerm.driver.ready.wait_ready`). Its receipts from the launch on hold a
        CLI whose hooks report its session start until it did. Its READY row is committed
        without an fsync (a display row; :meth:`RunStore.sync` for many agents at once).

        Raises
        ------
        AgentExited, AgentTimeout
            The message names the agent, what was awaited and its screen.
        """
        try:
            reading = await wait_ready(
                self._term,
                self.profile,
                timeout=timeout,
                name=self.name,
                say=say,
                on_reading=on_reading,
                on_dialog=on_dialog,
                receipts=self._word.receipts,
            )
        except PaneNotFound as exc:
            msg = f"agent {self.name} exited while starting: {exc}"
            raise AgentExited(msg) from None
        snap = await self.snapshot()
        if snap is not None:
            self._tracker.update(snap)
        if reading.rule == "quiet":
            # Only silence said so; the tracker cannot see it on one screen.
            self._tracker.state, self._tracker.latched = AgentState.READY, True
            self._tracker.ready_since = time.monotonic()
        self._row.ready()
        return reading

    async def prime(self, text: str, *, timeout: float) -> None:
        """Deliver the agent's primer (its instructions) and wait until it is ready again.

        Raises
        ------
        PromptNotDelivered
            The primer was not delivered; the message says how it ended.
        AgentExited, AgentTimeout
            It did not come back ready within ``timeout``.
        """
        result = await self.deliver(text)
        if not result.ok:
            msg = f"agent {self.name}: primer not delivered ({result.outcome.value}): {result.rule}"
            raise PromptNotDelivered(msg)
        # It answers the primer: let the screen leave the ready prompt it was confirmed on.
        await asyncio.sleep(0.05)
        await self.wait_ready(timeout)

    async def watch(
        self,
        until: Callable[[Observation], T | None],
        *,
        timeout: float,
        what: str,
        task_id: str | None = None,
    ) -> T:
        """Look on each output (bounded) until ``until(observation)`` is not None.

        See :func:`politerm.driver.looking.watch`.
        """
        from politerm.driver.looking import watch

        return await watch(self, until, timeout=timeout, what=what, task_id=task_id)

    # --- typing ---------------------------------------------------------------------------

    async def deliver(
        self,
        text: str | bytes,
        *,
        already_pasted: bool = False,
        serves: Serves | None = None,
        nonce: str | None = None,
        start_line: int | None = None,
        then: Callable[[DeliveryResult], None] | None = None,
    ) -> DeliveryResult:
        """Paste ``text``, submit it and confirm it (see :mod:`politerm.driver.delivery`).

        The input box is verified empty before the paste (cleared with the profile's
        ``clear_input`` keys when it is not); ``already_pasted`` submits the text an earlier
        STRANDED attempt left in the box instead. The tracker's ready latch ends here.

        A prompt that ``serves`` a workflow's record is written to the journal of turns
        before anything is typed (turn ``nonce``, its answer from ``start_line``; a row the
        caller wrote with :meth:`hand` goes on), and DELIVERED or FAILED there with what the
        delivery saw (:mod:`politerm.driver.journal`), in one commit with ``then(result)``,
        the caller's record of it; the result's ``turn_id`` names its row.
        """
        row = self.hand(text, serves, nonce=nonce, start_line=start_line)
        result = await self._deliver(text, already_pasted=already_pasted)
        return self._turns.delivered(row, result, then)

    def hand(
        self,
        text: str | bytes,
        serves: Serves | None,
        *,
        nonce: str | None = None,
        start_line: int | None = None,
    ) -> int | None:
        """Write (or find) the journal row of ``text``, about to be delivered; its id.

        Called inside the caller's store batch, the row commits with the caller's own record
        of the prompt (the loop's DELIVERING message); :meth:`deliver` then goes on in it.
        """
        if serves is not None and start_line is None and (snap := self.fresh_snapshot()):
            start_line = self.turn_start(snap)  # where a recovery reads it back from
        row = self._turns.hand(
            serves,
            text,
            nonce=nonce,
            start_line=start_line,
            conversation=self._row.conversation or None,
        )
        return None if row is None else row.id

    def confirmed_earlier(
        self,
        text: str,
        serves: Serves | None,
        proof: Mapping[str, t.Any],
        *,
        nonce: str | None = None,
        start_line: int | None = None,
    ) -> int | None:
        """Record in the journal that ``text`` reached the agent before a crash; its row id.

        What a recovery found (:func:`politerm.driver.leftover.resume`) confirms the
        attempt's open row (or a row written now, if the crash came before it): nothing is
        typed again.
        """
        turn_id = self.hand(text, serves, nonce=nonce, start_line=start_line)
        self._turns.confirmed(turn_id, proof)
        return turn_id

    def end_turn(self, turn_id: int | None, outcome: str) -> None:
        """The turn of journal row ``turn_id`` is over (for callers that follow it themselves)."""
        self._row.follow_conversation(self._word.receipts)
        self._turns.ended(turn_id, outcome, conversation=self._row.conversation or None)

    def abandon_turn(self, why: str) -> None:
        """The caller gave up the turn under way: its journal row is ABANDONED with ``why``."""
        self._turns.ended(self._turns.current, why, conversation=None, given_up=True)

    async def _deliver(self, text: str | bytes, *, already_pasted: bool) -> DeliveryResult:
        self._tracker.input_sent()
        self._meter.mark()
        check = await self._word.prompt(text)
        await self._hook("before-paste")
        # The empty-box check reads the screen already looked at, if nothing printed since.
        snap = self.fresh_snapshot()
        self._look = None
        try:
            result = await deliver(
                self._term,
                text,
                self.profile,
                already_pasted=already_pasted,
                snap=snap,
                receipt=check,
                before_submit=lambda: self._hook("before-submit"),
            )
        except ControlModeError as exc:
            # The connection dropped mid-delivery: nothing is known to be submitted.
            return DeliveryResult(Outcome.STRANDED, (str(exc),), 0, False, 0.0, "tmux dropped")
        except PtyError as exc:
            # The program's terminal closed under us: it exited.
            self._dead = True
            return DeliveryResult(Outcome.AGENT_EXITED, (str(exc),), 0, False, 0.0, "pty closed")
        if result.outcome is Outcome.AGENT_EXITED:
            self._dead = True
        if check is not None:
            result = await cross_check_delivery(self, result, check, grace=self.hook_grace)
        await self._hook("after-confirm")
        return result

    async def clear_input(self) -> bool:
        """Empty the input box (e.g. a dead-lettered prompt left there); True when empty."""
        self._look = None
        snap = await clear_input(self._term, self.profile)
        return snap is not None and not self.profile.input_text(snap)

    async def press(self, *keys: str) -> None:
        """Press named keys (an interrupt, a menu answer)."""
        self._look = None
        await self._term.send_keys(*keys)

    # --- reading --------------------------------------------------------------------------

    async def history(self) -> list[str]:
        """Its terminal's scrollback, then its screen (what scrolled off the screen too)."""
        return await self._term.capture_history()

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
        hooked_home(self.profile.transcript, self._blocks.env, await self.hook_receipts())
        return await self._blocks.read(snap, start_line, nonce, task_id=task_id)

    async def read_window(self, snap: Snapshot, window: Window, *, idle: bool) -> list[Block]:
        """The new blocks of a turn the caller keeps itself; see :meth:`BlockReader.read_window`."""
        hooked_home(self.profile.transcript, self._blocks.env, await self.hook_receipts())
        return await self._blocks.read_window(snap, window, idle=idle)

    @property
    def blocks_settling(self) -> bool:
        """Whether a block was seen once and waits for a second look before it counts."""
        return bool(self._blocks.parser.unsettled)

    def follow_transcript(self, nonce: str | None) -> None:
        """Read the transcript's new blocks: each is cross-checked with the screen's copy."""
        self._blocks.transcript(nonce)

    # --- a turn the caller keeps itself (the router) ---------------------------------------

    def new_turn(self) -> None:
        """A new prompt's turn begins: the last turn's rejected blocks are forgotten."""
        self._blocks.new_turn()

    def turn_delivered(self, task_id: str | None) -> None:
        """The turn's prompt is confirmed: its tokens count from here (for ``task_id``)."""
        self._meter.start_turn(task_id)

    def turn_ended(self) -> None:
        """The turn is over: its tokens stop counting."""
        self._meter.end_turn()

    def over_budget(self) -> str | None:
        """Count the tokens written since the last call; the ``[budget]`` cap crossed, if any."""
        self._meter.poll()
        return self._meter.over_budget()

    def output(self, on_text: Callable[[str], None]) -> Callable[[], None]:
        """Send the agent's output, decoded, to ``on_text`` (a transcript); returns a remover."""
        return tap(self._term, on_text)

    def reports(
        self, session_id: str, *, on_text: Callable[[str], None] | None = None
    ) -> ReportStream:
        """Subscribe to the fenced report ``poli:<session_id>`` in the agent's output."""
        return ReportStream(self._term, session_id, on_text=on_text)

    #: Deliver a prompt and watch until it is answered: :func:`politerm.driver.turn.run_turn`.
    run_turn = run_turn

    def live_view(
        self, *, fields: Callable[[], Sequence[str]], on_interrupt: Callable[[], None]
    ) -> LiveView | None:
        """The operator's terminal attached to the agent's PTY, with a status line.

        Use as ``async with``; see :class:`~politerm.pty.liveview.LiveView`. None when the
        agent runs in a tmux pane (the operator attaches to it with tmux).
        """
        return self._term.live_view(fields=fields, on_interrupt=on_interrupt)

    # --- stopping -------------------------------------------------------------------------

    async def kill(self, *, grace: float = 3.0) -> None:
        """Kill the agent's whole process tree (verified gone); a pane keeps its window."""
        with contextlib.suppress(PaneNotFound, ControlModeError):
            await self._term.kill(grace=grace)
        self._dead = True
        if self._word.receipts is not None:
            await self._word.receipts.close()
