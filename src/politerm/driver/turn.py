"""One prompt and its answer: the high-level call of the agent driver.

:func:`run_turn` delivers a prompt with a fresh nonce and watches the agent until the
answer it expects arrives, answering approval questions by policy (or waiting for ``poli
approve``) on the way. It ends on every path with a :class:`TurnResult`:

- ANSWERED: the expected block (with the turn's nonce) or the fenced report arrived and the
  agent is idle again with no open question (a question after the block keeps it open);
- IDLE: the agent sat ready without answering for the profile's ``idle_after``, was nudged
  ``idle_nudges`` times, and still did not answer;
- TIMEOUT: the bound ran out (counted from confirmed delivery); the error names the blocks
  rejected in the turn and why, a pending approval, and whether nudges were delivered;
- EXITED, STUCK, NOT_DELIVERED, REPORT_ERROR: what they say, with the screen.
"""

from __future__ import annotations

import dataclasses
import enum
import time
import typing as t

from politerm._internal.aio import wait_event
from politerm.agents.state import AgentState
from politerm.driver.delivery import Outcome
from politerm.errors import ReportError
from politerm.protocol.primer import new_nonce

if t.TYPE_CHECKING:
    from collections.abc import Callable

    from politerm.driver.agent import AgentDriver, ReportStream
    from politerm.driver.delivery import DeliveryResult
    from politerm.protocol.block import Block
    from politerm.protocol.report import Report

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
    nudge: str | None = NUDGE_TEXT,
    nudges: int | None = None,
    idle_after: float | None = None,
    on_text: Callable[[str], None] | None = None,
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
        What an idle agent is told, how often, after how long ready without an answer
        (defaults: the profile's ``idle_nudges`` and ``idle_after``); ``nudge=None`` never
        nudges.
    on_text
        Sees the agent's decoded output as it arrives (report turns; transcripts).

    Returns
    -------
    TurnResult
        Never raises for an agent that misbehaves.
    """
    nonce = nonce or new_nonce()
    text = prompt(nonce) if callable(prompt) else prompt
    snap = await driver.snapshot()
    start = driver.turn_start(snap) if snap is not None else -1
    driver.blocks.new_turn()
    reports = driver.reports(expect.report, on_text=on_text) if expect.report else None
    try:
        return await _Turn(
            driver,
            expect,
            nonce,
            start,
            task_id,
            reports,
            nudge,
            driver.profile.idle_nudges if nudges is None else nudges,
            driver.profile.idle_after if idle_after is None else idle_after,
        ).run(text, timeout)
    finally:
        if reports is not None:
            reports.close()


@dataclasses.dataclass
class _Turn:
    driver: AgentDriver
    expect: Expect
    nonce: str
    start: int
    task_id: str | None
    reports: ReportStream | None
    nudge: str | None
    max_nudges: int
    idle_after: float
    nudges: int = 0
    delivery: DeliveryResult | None = None
    answer: tuple[Block, ...] = ()
    report: Report | None = None
    answered_at: float = 0.0

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
        )

    async def run(self, text: str, timeout: float) -> TurnResult:
        d = self.driver
        self.delivery = await d.deliver(text)
        res = self.delivery
        if not (res.ok or (res.outcome is Outcome.BLOCKED and res.submitted)):
            outcome = (
                TurnOutcome.EXITED
                if res.outcome is Outcome.AGENT_EXITED
                else TurnOutcome.NOT_DELIVERED
            )
            return self.result(
                outcome,
                f"{d.name}: prompt not delivered ({res.outcome.value}: {res.rule}): "
                + " | ".join(res.evidence[-3:]),
            )
        deadline = time.monotonic() + timeout
        idle_from = time.monotonic()
        while True:
            event = d.term.output_event()
            obs = await d.observe(task_id=self.task_id)
            await self._look_for_answer(obs.snap)
            if self.reports is not None:
                for signal in self.reports.signals:
                    if isinstance(signal, ReportError):
                        return self.result(TurnOutcome.REPORT_ERROR, f"bad report: {signal}")
            now = time.monotonic()
            state = obs.state
            if state is AgentState.EXITED:
                return self._exited()
            answered = bool(self.answer) or self.report is not None
            # Done only when idle with no open question (one after the block keeps it open).
            settled = state is AgentState.READY or (
                state not in (AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG)
                and now - self.answered_at >= _SETTLE
            )
            if answered and settled:
                return self.result(TurnOutcome.ANSWERED)
            if state is AgentState.STUCK:
                return self.result(
                    TurnOutcome.STUCK,
                    f"{d.name} is stuck ({obs.reading.rule}): " + " | ".join(obs.reading.evidence),
                )
            if state is AgentState.READY and not answered:
                d.blocks.report(d.blocks.unfinished(), task_id=self.task_id)
            if state is not AgentState.READY:
                idle_from = now
            elif not answered and now - idle_from >= self.idle_after:
                if self.nudge is None or self.nudges >= self.max_nudges:
                    return self.result(TurnOutcome.IDLE, self._idle_error())
                nudged = await d.deliver(f"{self.nudge} (nonce {self.nonce})")
                if nudged.ok or nudged.submitted:
                    self.nudges += 1
                idle_from = time.monotonic()
                continue
            if now >= deadline:
                if answered:
                    return self.result(TurnOutcome.ANSWERED)
                return self.result(TurnOutcome.TIMEOUT, self._timeout_error(timeout))
            backstop = _READY_BACKSTOP if state is AgentState.READY else _BACKSTOP
            await wait_event(event, min(backstop, deadline - now))

    async def _look_for_answer(self, snap: t.Any) -> None:
        if self.reports is not None:
            for signal in self.reports.signals:
                if not isinstance(signal, ReportError) and self.report is None:
                    self.report = signal
                    self.answered_at = time.monotonic()
            return
        if self.answer:
            return
        for block in await self.driver.read_blocks(
            snap, self.start, self.nonce, task_id=self.task_id
        ):
            if self.expect.matches(block):
                self.answer = (block,)
                self.answered_at = time.monotonic()
                return

    def _exited(self) -> TurnResult:
        if self.reports is not None and self.report is None:
            self.reports.flush()
            for signal in self.reports.signals:
                if not isinstance(signal, ReportError):
                    self.report = signal
        if self.report is not None or self.answer:
            return self.result(TurnOutcome.ANSWERED)
        screen = " | ".join(ln.strip() for ln in self.driver.last_screen if ln.strip())
        return self.result(
            TurnOutcome.EXITED, f"{self.driver.name} exited before answering: {screen[-300:]}"
        )

    def _what(self) -> str:
        if self.expect.report is not None:
            return f"a poli:{self.expect.report} report"
        kinds = "|".join(sorted(self.expect.types)) or "any"
        return f"a {kinds} block with nonce {self.nonce}"

    def _facts(self) -> str:
        d = self.driver
        facts = []
        rejected = d.blocks.rejections_text()
        facts.append(f"rejected blocks: {rejected}" if rejected else "no block was rejected")
        pending = d.approver.pending
        if pending is not None:
            facts.append(
                f"an approval is pending: {pending.what} (answer with `poli approve "
                f"{d.approver.key}`)"
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
        return f"{self.driver.name} sent no {self._what()} within {timeout:g}s; {self._facts()}"
