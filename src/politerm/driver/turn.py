"""One prompt and its answer: the high-level call of the agent driver.

:func:`run_turn` delivers a prompt with a fresh nonce and watches the agent until the
answer it expects arrives, answering approval questions by policy (or waiting for ``poli
approve``) on the way. It ends on every path with a :class:`TurnResult`:

- ANSWERED: the expected block (with the turn's nonce) or the fenced report arrived — or
  ``answered_elsewhere`` says the agent answered by another channel (a command it ran) —
  and the agent is idle again with no open question (a question after the block keeps it
  open).
  Where the agent's hooks report its stop event, the turn ends on that event and the screen
  cross-checks it: :attr:`TurnResult.ended_by` names the sources, and a disagreement that
  outlasts :data:`~politerm.driver.receipts.HOOK_GRACE` is recorded as drift. Where no hook
  reports it, a transcript whose records say when a turn is over (Gemini CLI's, opencode's)
  plays that part;
- IDLE: the agent sat ready without answering for the profile's ``idle_after``, was nudged
  ``idle_nudges`` times, and still did not answer;
- TIMEOUT: the bound ran out (counted from confirmed delivery, without the time the agent
  spent LIMITED waiting for a usage limit to reset); the error names the blocks rejected in
  the turn and why, a pending approval, and whether nudges were delivered;
- OVER_BUDGET: the turn (its task, the run) used more tokens than a ``[budget]`` cap; the
  agent is interrupted and a ``budget`` event names the cap;
- ABORTED: the operator stopped the turn (``stop``, :mod:`politerm.driver.stop`): at once,
  or after a soft stop delivered the ``wrap_up`` note and the ``grace`` period passed without
  the answer;
- EXITED, STUCK, NOT_DELIVERED, REPORT_ERROR: what they say, with the screen (and the exit
  status). A fenced report is read to the end of the output (obi's legacy footer after the
  fence is cross-checked with it), also when the agent exits right after printing it.

The turn's tokens (from the agent's transcript) are counted on the way and recorded when
it ends (:mod:`politerm.driver.tokens`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import time
import typing as t

from politerm._internal.aio import wait_any
from politerm.agents.state import AgentState
from politerm.driver.delivery import Outcome
from politerm.driver.receipts import Drift
from politerm.errors import ReportError
from politerm.protocol.primer import new_nonce

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.driver.agent import AgentDriver
    from politerm.driver.delivery import DeliveryResult
    from politerm.driver.reports import ReportStream
    from politerm.driver.stop import StopControl
    from politerm.protocol.block import Block
    from politerm.protocol.report import Report
    from politerm.store.journal import Serves
    from politerm.terminal import Snapshot

#: What a nudge says (the turn's nonce is appended).
NUDGE_TEXT = "If you are finished, emit the requested block (or report) now."
# Longest sleep while the agent works / while it sits ready (an answer without output).
_BACKSTOP = 2.0
_READY_BACKSTOP = 0.5
# After the answer, how long an agent that shows no definite state counts as idle.
_SETTLE = 1.0


class TurnOutcome(enum.StrEnum):
    """How a turn ended."""

    ANSWERED = "answered"
    IDLE = "idle"
    TIMEOUT = "timeout"
    EXITED = "exited"
    STUCK = "stuck"
    NOT_DELIVERED = "not_delivered"
    REPORT_ERROR = "report_error"
    OVER_BUDGET = "over_budget"
    ABORTED = "aborted"


@dataclasses.dataclass(frozen=True)
class Expect:
    """What answers a turn: a tagged block, or a fenced report.

    Parameters
    ----------
    types
        Block types that answer (empty: any type).
    block_id
        The id the block must carry (None: any).
    report
        A session id: the turn is answered by the fenced report ``poli:<report>`` instead.
    """

    types: frozenset[str] = frozenset()
    block_id: str | None = None
    report: str | None = None

    @classmethod
    def block(cls, *types: str, block_id: str | None = None) -> Expect:
        """Expect a block of one of ``types`` (any type when none is named)."""
        return cls(frozenset(types), block_id)

    @classmethod
    def fenced_report(cls, session_id: str) -> Expect:
        """Expect the fenced report of session ``session_id``."""
        return cls(report=session_id)

    def matches(self, block: Block) -> bool:
        """Whether ``block`` answers the turn."""
        if self.report is not None:
            return False
        if self.types and block.type not in self.types:
            return False
        return self.block_id is None or block.id == self.block_id


@dataclasses.dataclass(frozen=True)
class TurnResult:
    """The end of one turn and its evidence."""

    outcome: TurnOutcome
    nonce: str
    blocks: tuple[Block, ...] = ()
    report: Report | None = None
    delivery: DeliveryResult | None = None
    nudges: int = 0
    error: str = ""
    screen: tuple[str, ...] = ()
    ended_by: str = ""
    """Which sources ended the turn: ``hook``, ``transcript``, ``screen``, ``hook+screen``
    or ``transcript+screen``."""
    drift: tuple[str, ...] = ()
    """Disagreements between the agent's hooks and its screen during the turn."""
    limited_for: float = 0.0
    elsewhere: bool = False
    """The turn was answered by another channel (``answered_elsewhere``), not on screen."""
    exit_status: int | None = None
    """The agent's exit status, when it exited during the turn (and the backend knows it)."""
    wrapped_up: bool = False
    """A soft stop delivered the ``wrap_up`` note."""
    turn_id: int | None = None
    """The prompt's row in the journal of turns (when the caller named the record served)."""

    @property
    def ok(self) -> bool:
        """True when the turn was answered."""
        return self.outcome is TurnOutcome.ANSWERED

    @property
    def block(self) -> Block | None:
        """The answering block, if a block answered."""
        return self.blocks[-1] if self.blocks else None


async def run_turn(
    driver: AgentDriver,
    prompt: str | Callable[[str], str],
    expect: Expect,
    *,
    timeout: float,
    nonce: str | None = None,
    task_id: str | None = None,
    nudge: str | Callable[[str], str] | None = NUDGE_TEXT,
    nudges: int | None = None,
    idle_after: float | None = None,
    on_text: Callable[[str], None] | None = None,
    answered_elsewhere: Callable[[], bool] | None = None,
    stop: StopControl | None = None,
    wrap_up: str | None = None,
    grace: float = 0.0,
    on_progress: Callable[[str], None] | None = None,
    start: int | None = None,
    resumed: t.Literal["pasted", "delivered"] | None = None,
    serves: Serves | None = None,
) -> TurnResult:
    """Deliver ``prompt`` to ``driver``'s agent and watch until ``expect`` is met.

    Parameters
    ----------
    prompt
        The text, or a function of the turn's nonce that renders it.
    expect
        The answer awaited.
    timeout
        Seconds from confirmed delivery.
    nonce
        The turn's nonce (default: a fresh one).
    task_id
        For events.
    nudge, nudges, idle_after
        What an idle agent is told (the turn's nonce is appended; a function of the nonce
        renders the whole text), how often, after how long ready without an answer
        (defaults: the profile's ``idle_nudges`` and ``idle_after``); ``nudge=None`` never
        nudges.
    on_text
        Sees the agent's decoded output as it arrives (report turns; transcripts).
    answered_elsewhere
        Asked on every look at the agent: True once the agent answered by another channel
        (e.g. a command that records its report); the turn then ends like an answered one,
        when the agent is idle again, and is never nudged.
    stop, wrap_up, grace
        The operator's stop requests: an abort ends the turn at once (ABORTED); a soft stop
        delivers ``wrap_up`` (when given), stops nudging, and ends the turn ABORTED if the
        answer has not come ``grace`` seconds later.
    on_progress
        Told ``"working"`` once the prompt is confirmed, ``"answered"`` when the answer is
        seen, ``"wrapping up"`` when a soft stop's note goes out (a status line).
    start
        The turn's first line, when the caller recorded it before (default: where the
        screen's output ends now). A recovered turn reads its answer from there.
    resumed
        A turn an earlier watcher began (a crash in between): ``"pasted"`` submits the
        prompt already in the input box instead of pasting it again; ``"delivered"`` only
        watches for the answer (the prompt was submitted; ``nonce`` is the turn's).
    serves
        The workflow record the prompt serves: the turn gets a row in the journal of turns
        (:mod:`politerm.driver.journal`), written before anything is typed; a resumed turn
        goes on in the attempt's open row.

    Returns
    -------
    TurnResult
        Never raises for an agent that misbehaves.
    """
    nonce = nonce or new_nonce()
    text = prompt(nonce) if callable(prompt) else prompt
    if start is None:
        snap = await driver.snapshot()
        start = driver.turn_start(snap) if snap is not None else -1
    driver._blocks.new_turn()
    reports = driver.reports(expect.report, on_text=on_text) if expect.report else None
    try:
        result = await _Turn(
            driver,
            expect,
            nonce,
            start,
            task_id,
            reports,
            nudge,
            driver.profile.idle_nudges if nudges is None else nudges,
            driver.profile.idle_after if idle_after is None else idle_after,
            answered_elsewhere,
            stop,
            wrap_up,
            grace,
            on_progress or (lambda _word: None),
            serves=serves,
        ).run(text, timeout, resumed)
        if result.outcome is TurnOutcome.ANSWERED:
            await driver._meter.settle()
    finally:
        driver._meter.end_turn()
        if reports is not None:
            reports.close()
    # A CLI may name its conversation only at a turn's end: its row keeps it.
    driver.end_turn(result.turn_id, result.outcome.value)
    return result


@dataclasses.dataclass
class _Turn:
    driver: AgentDriver
    expect: Expect
    nonce: str
    start: int
    task_id: str | None
    reports: ReportStream | None
    nudge: str | Callable[[str], str] | None
    max_nudges: int
    idle_after: float
    answered_elsewhere: Callable[[], bool] | None = None
    stop: StopControl | None = None
    wrap_up: str | None = None
    grace: float = 0.0
    progress: Callable[[str], None] = lambda _word: None
    serves: Serves | None = None
    turn_id: int | None = None
    grace_until: float | None = None
    wrapped_up: bool = False
    exit_status: int | None = None
    elsewhere: bool = False
    nudges: int = 0
    delivery: DeliveryResult | None = None
    answer: tuple[Block, ...] = ()
    report: Report | None = None
    answered_at: float = 0.0
    ended_by: str = ""
    drift_from: int = 0
    disagree_since: float | None = None
    limited_for: float = 0.0

    def result(self, outcome: TurnOutcome, error: str = "") -> TurnResult:
        return TurnResult(
            outcome,
            self.nonce,
            self.answer,
            self.report,
            self.delivery,
            self.nudges,
            error,
            tuple(ln.rstrip() for ln in self.driver.last_screen if ln.strip())[-8:],
            self.ended_by,
            tuple(str(d) for d in self.driver.drifts[self.drift_from :]),
            self.limited_for,
            self.elsewhere,
            self.exit_status,
            self.wrapped_up,
            self.turn_id,
        )

    def _answered(self) -> TurnResult:
        """ANSWERED, with a report read to the end of the output (a legacy footer, drift)."""
        if self.reports is not None and self.report is not None:
            try:
                self.report = self.reports.parser.finish()
            except ReportError as exc:
                return self.result(TurnOutcome.REPORT_ERROR, f"bad report: {exc}")
        return self.result(TurnOutcome.ANSWERED)

    async def run(self, text: str, timeout: float, resumed: str | None) -> TurnResult:
        d = self.driver
        self.drift_from = len(d.drifts)
        woken = asyncio.Event()
        if self.stop is not None:
            if self.stop.aborted:
                return self.result(TurnOutcome.ABORTED, "aborted by the operator before the prompt")
            remove = self.stop.listen(woken.set)
        try:
            return await self._run(text, timeout, woken, resumed)
        finally:
            if self.stop is not None:
                remove()

    async def _run(
        self, text: str, timeout: float, woken: asyncio.Event, resumed: str | None
    ) -> TurnResult:
        d = self.driver
        if resumed != "delivered":
            self.delivery = await d.deliver(
                text,
                already_pasted=resumed == "pasted",
                serves=self.serves,
                nonce=self.nonce,
                start_line=self.start,
            )
            self.turn_id = self.delivery.turn_id
        else:
            self.turn_id = d.confirmed_earlier(
                text, self.serves, {"rule": "resumed"}, nonce=self.nonce, start_line=self.start
            )
        res = self.delivery
        if res is not None and not res.got_in:
            evidence = " | ".join(res.evidence[-3:])
            if res.outcome is Outcome.AGENT_EXITED:
                snap = await d.snapshot()
                self.exit_status = None if snap is None else snap.exit_status
                status = "?" if self.exit_status is None else self.exit_status
                return self.result(
                    TurnOutcome.EXITED,
                    f"{d.name} exited (status {status}) as the prompt was submitted: {evidence}",
                )
            return self.result(
                TurnOutcome.NOT_DELIVERED,
                f"{d.name}: prompt not delivered ({res.outcome.value}: {res.rule}): {evidence}",
            )
        d._meter.start_turn(self.task_id)
        self.progress("working")
        deadline = time.monotonic() + timeout
        idle_from = time.monotonic()
        rc = d._word.receipts
        limited_at: float | None = None
        while True:
            woken.clear()
            events = [d._term.output_event(), woken] + ([rc.event()] if rc is not None else [])
            obs = await d.observe(task_id=self.task_id)
            await self._look_for_answer(obs.snap)
            if self.reports is not None:
                for signal in self.reports.signals:
                    if isinstance(signal, ReportError):
                        return self.result(TurnOutcome.REPORT_ERROR, f"bad report: {signal}")
            answered = bool(self.answer) or self.report is not None or self.elsewhere
            stopped = await self._stopped(answered)
            if stopped is not None:
                return stopped
            now = time.monotonic()
            state = obs.state
            if state is AgentState.EXITED:
                self.exit_status = obs.snap.exit_status
                return self._exited()
            over = d.over_budget()
            if over is not None and not (self.answer or self.report is not None):
                await d.press(d.profile.interrupt_key)
                d.record("budget", self.task_id, f"turn ended: {over}")
                return self.result(TurnOutcome.OVER_BUDGET, over)
            # Waiting for a usage limit to reset does not count against the turn.
            if state is AgentState.LIMITED and limited_at is None:
                limited_at = now
            elif state is not AgentState.LIMITED and limited_at is not None:
                deadline += now - limited_at
                self.limited_for += now - limited_at
                limited_at = None
            # Done only when idle with no open question (one after the block keeps it open).
            settled = obs.hook_approval is None and (
                state is AgentState.READY
                or (
                    state not in (AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG)
                    and now - self.answered_at >= _SETTLE
                )
            )
            if answered:
                done = self._ended(settled, obs.reading.rule, state, now)
                if done is not None:
                    return done
            if state is AgentState.STUCK:
                return self.result(
                    TurnOutcome.STUCK,
                    f"{d.name} is stuck ({obs.reading.rule}): " + " | ".join(obs.reading.evidence),
                )
            if state is AgentState.READY and not answered:
                d._blocks.report(d._blocks.unfinished(), task_id=self.task_id)
            if state is not AgentState.READY:
                idle_from = now
            elif not answered and self.grace_until is None and now - idle_from >= self.idle_after:
                if self.nudge is None or self.nudges >= self.max_nudges:
                    return self.result(TurnOutcome.IDLE, self._idle_error())
                nudge = self.nudge
                nudged = await d.deliver(
                    nudge(self.nonce) if callable(nudge) else f"{nudge} (nonce {self.nonce})"
                )
                if nudged.ok or nudged.submitted:
                    self.nudges += 1
                idle_from = time.monotonic()
                continue
            if self.grace_until is not None and now >= self.grace_until:
                if answered:
                    return self._answered()
                return self.result(
                    TurnOutcome.ABORTED,
                    f"soft stop: no {self._what(article=False)} within the {self.grace:g}s "
                    "grace period",
                )
            if now >= deadline and limited_at is None:
                if answered:
                    return self._answered()
                return self.result(TurnOutcome.TIMEOUT, self._timeout_error(timeout))
            backstop = _READY_BACKSTOP if state is AgentState.READY else _BACKSTOP
            if d.blocks_settling:  # the second look that lets a block count
                backstop = min(backstop, d.profile.block_settle)
            if self.grace_until is not None:
                backstop = min(backstop, max(0.0, self.grace_until - now))
            if limited_at is not None:
                await wait_any(*events, timeout=min(backstop, d._limiter.due_in() or backstop))
                continue
            await wait_any(*events, timeout=max(0.0, min(backstop, deadline - now)))

    async def _stopped(self, answered: bool) -> TurnResult | None:
        """The operator's stop: the turn's end on an abort; a soft stop's note; else None."""
        stop = self.stop
        if stop is None or not stop.soft:
            return None
        if stop.aborted:
            return (
                self._answered()
                if answered
                else self.result(TurnOutcome.ABORTED, "aborted by the operator")
            )
        if self.grace_until is None and not answered:
            self.grace_until = time.monotonic() + self.grace
            if self.wrap_up is not None:
                self.progress("wrapping up")
                await self.driver.deliver(self.wrap_up)
                self.wrapped_up = True
        return None

    def _ended(self, settled: bool, rule: str, state: AgentState, now: float) -> TurnResult | None:
        """The answered turn's end, from the agent's stop event and the screen; None: not yet."""
        d = self.driver
        source, stop = d._word.turn_end()
        if source is None:
            if settled:
                self.ended_by = "screen"
                return self._answered()
            return None
        if stop is not None and settled:
            self.ended_by = f"{source}+screen"
            return self._answered()
        blocked = state in (AgentState.WAITING_APPROVAL, AgentState.DIALOG)
        if (stop is None) == (not settled) or blocked:
            self.disagree_since = None  # both say "still going", or a question is open
            return None
        self.disagree_since = self.disagree_since or now
        if now - self.disagree_since < d.hook_grace:
            return None
        if stop is not None:
            drift = Drift("turn-end", stop, f"still {state.value} ({rule})", source)
            self.ended_by = source
        else:
            said = "no stop event" if source == "hook" else "no turn end in it"
            drift = Drift("turn-end", f"{said} within {d.hook_grace:g}s", state.value, source)
            self.ended_by = "screen"
        d.drift(drift, task_id=self.task_id)
        return self._answered()

    async def _look_for_answer(self, snap: Snapshot) -> None:
        answered = self.answer or self.report is not None or self.elsewhere
        if not answered and self.answered_elsewhere is not None and self.answered_elsewhere():
            self.elsewhere = True
            self.answered_at = time.monotonic()
            self.progress("answered")
            return
        if self.reports is not None:
            for signal in self.reports.signals:
                if not isinstance(signal, ReportError) and self.report is None:
                    self.report = signal
                    self.answered_at = time.monotonic()
                    self.progress("answered")
            return
        if self.answer or self.elsewhere:
            return
        for block in await self.driver.read_blocks(
            snap, self.start, self.nonce, task_id=self.task_id
        ):
            if self.expect.matches(block):
                self.answer = (block,)
                self.answered_at = time.monotonic()
                self.progress("answered")
                return

    def _exited(self) -> TurnResult:
        d = self.driver
        status = "?" if self.exit_status is None else self.exit_status
        why = ""
        if self.reports is not None and self.report is None:
            # Its last line may have had no newline: read the output to its end.
            self.reports.flush()
            try:
                self.report = self.reports.parser.finish()
            except ReportError as exc:
                why = f"{exc}; "
            else:
                return self.result(TurnOutcome.ANSWERED)
        if self.report is not None or self.answer or self.elsewhere:
            return self._answered()
        screen = " | ".join(ln.strip() for ln in d.last_screen if ln.strip())
        return self.result(
            TurnOutcome.EXITED,
            f"{d.name} exited (status {status}) before answering: {why}{screen[-300:]}",
        )

    def _what(self, *, article: bool = True) -> str:
        if self.expect.report is not None:
            return ("its " if article else "") + f"poli:{self.expect.report} report"
        kinds = "|".join(sorted(self.expect.types)) or "any"
        return ("a " if article else "") + f"{kinds} block with nonce {self.nonce}"

    def _facts(self) -> str:
        d = self.driver
        facts = []
        facts.append(d._blocks.rejections_fact())
        pending = d._approver.pending
        if pending is not None:
            facts.append(
                f"an approval is pending: {pending.what} (answer with `poli approve "
                f"{d._approver.key}`)"
            )
        facts.append(f"{self.nudges} nudge(s) delivered" if self.nudge is not None else "no nudges")
        tail = " | ".join(d.last_words())[-300:]
        facts.append(f"last on its screen: {tail}")
        return "; ".join(facts)

    def _idle_error(self) -> str:
        return (
            f"{self.driver.name} went idle without {self._what()} "
            f"({self.idle_after:g}s ready after each of {self.nudges} nudge(s)); {self._facts()}"
        )

    def _timeout_error(self, timeout: float) -> str:
        what = self._what(article=False)
        return f"{self.driver.name} sent no {what} within {timeout:g}s; {self._facts()}"
