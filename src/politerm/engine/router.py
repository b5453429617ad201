"""The router: moves tagged messages between agent panes until each task is done.

Everything it decides is written to the run store before it acts, so a router killed at any
moment and started again picks up where the store says it was: a message is marked delivered
only on confirmed delivery, a block re-read after a restart changes nothing twice (every
effect is idempotent on the block's dedupe key), and a prompt whose delivery was cut short
is checked on the agent's screen before it is sent again.

It is event-driven: each agent's loop sleeps on that pane's ``%output`` event (or a store
change, or its next deadline) and reads the screen only when something happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import time
import typing as t

from politerm._internal.aio import wait_any
from politerm.agents.approval import (
    ApprovalPolicy,
    Decision,
    PendingApproval,
    clear_pending,
    describe,
    get_pending,
    set_pending,
)
from politerm.agents.state import AgentState
from politerm.agents.tracker import StateTracker
from politerm.driver.delivery import Outcome, deliver
from politerm.driver.transcripts import locate_transcript
from politerm.engine.templates import Templates
from politerm.errors import (
    ControlModeError,
    PaneNotFound,
    ServerNotRunning,
    StoreError,
    TmuxLookupError,
)
from politerm.protocol import BlockParser, TranscriptTail, cross_check
from politerm.protocol.contract import Contract, after_prompt, nonce_required, nonceless
from politerm.protocol.contract import status_task as _status_of
from politerm.protocol.parser import last_prompt_line
from politerm.protocol.primer import new_nonce
from politerm.store.models import MessageState, TaskState
from politerm.store.watch import EventCursor, StoreWatch, agents_with_work

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.agents.state import StateReading
    from politerm.config import Config
    from politerm.protocol.block import Block
    from politerm.store import RunStore
    from politerm.store.models import Message, Task, Turn
    from politerm.terminal import Snapshot
    from politerm.tmux.pane import Pane

log = logging.getLogger(__name__)

PLANNER = "PLANNER"
EXECUTER = "EXECUTER"
USER_TARGETS = frozenset({"USER", "ORCH", "ORCHESTRATOR", "HUMAN"})
FINAL_TYPES = frozenset({"final", "done"})
ACTIVE = frozenset({TaskState.PENDING, TaskState.PLANNING, TaskState.EXECUTING})
# An agent idle this long after a prompt, with no block, has answered without one.
IDLE_GRACE = 1.5
# Upper bound on how long an agent loop sleeps without any event.
# Longest sleep of an agent loop with no event: idle agent / agent working on a turn.
IDLE_BACKSTOP = 10.0
TURN_BACKSTOP = 2.0
# Full store scan (new tasks, deadlines, expiry) on every commit (store notification), and at
# least this often while a task is in flight (deadlines are time, not events).
SCAN_EVERY = 1.0
# With nothing in flight the router sleeps until a commit; this only bounds a lost
# notification (and how late the caller's until() is asked without one).
IDLE_TICK = 30.0
RESUME_META = "resume-state:"
# After pressing an approval's keys, the question may stay on screen until the agent redraws.
APPROVAL_HOLD = 5.0


@dataclasses.dataclass
class AgentRuntime:
    """What the router keeps in memory about one agent; the store holds the rest."""

    name: str
    profile: AgentProfile
    pane: Pane
    parser: BlockParser
    state: AgentState = AgentState.STARTING
    turn_nonce: str | None = None
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    dead: bool = False
    last_screen: tuple[str, ...] = ()
    cwd: pathlib.Path | None = None
    last_nonce: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    # The agent's own transcript: parsed with its own parser and cross-checked with the
    # screen, keyed by (nonce, type, id).
    tail: TranscriptTail | None = None
    tparser: BlockParser = dataclasses.field(default_factory=lambda: BlockParser(detect_echo=False))
    screen_blocks: dict[tuple[str | None, str, str], Block] = dataclasses.field(
        default_factory=dict
    )
    transcript_blocks: dict[tuple[str | None, str, str], Block] = dataclasses.field(
        default_factory=dict
    )
    checked: set[tuple[str | None, str, str]] = dataclasses.field(default_factory=set)
    # The state tracker (ready latch, STUCK); made from the profile when left out.
    tracker: StateTracker | None = None
    # The screen on which approval keys were last pressed, and when.
    approval_screen: tuple[str, ...] | None = None
    approval_at: float = 0.0
    approval_asked: bool = False

    def __post_init__(self) -> None:
        if self.tracker is None:
            self.tracker = StateTracker(self.profile)

    @property
    def track(self) -> StateTracker:
        """The tracker (always set after construction)."""
        assert self.tracker is not None
        return self.tracker


class Router:
    """Routes messages between the agents of one session.

    Parameters
    ----------
    config
        Timeouts, routing limits and the agents.
    store
        The run store (the source of truth).
    agents
        The running agents: name → (profile, pane).
    templates
        The prompts.
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        agents: dict[str, tuple[AgentProfile, Pane]],
        *,
        templates: Templates | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.templates = templates or Templates(contract=config.routing.contract)
        self._nonce_required = nonce_required(config.routing.require_nonce, config.routing.contract)
        self._poliseed = config.routing.contract == Contract.POLISEED.value
        self.agents: dict[str, AgentRuntime] = {
            name: AgentRuntime(
                name,
                profile,
                pane,
                BlockParser(detect_echo=True, message_dir=self._cwd(name)),
                cwd=self._cwd(name),
                env={**profile.env, **self._env(name)},
            )
            for name, (profile, pane) in agents.items()
        }
        for rt in self.agents.values():
            rt.tparser = BlockParser(detect_echo=False, message_dir=rt.cwd)
        self.policy = ApprovalPolicy.of(config.routing.approval, config.routing.approval_patterns)
        self._stop = asyncio.Event()
        self._fatal: str | None = None
        self._data_version = -1
        self._next_scan = 0.0
        self._in_flight = True
        self._events = EventCursor(store)

    def _cwd(self, name: str) -> pathlib.Path | None:
        # Long bodies come as files in the agent's working directory; nowhere else.
        acfg = self.config.agents.get(name)
        return pathlib.Path(acfg.cwd).expanduser().resolve() if acfg is not None else None

    def _env(self, name: str) -> dict[str, str]:
        acfg = self.config.agents.get(name)
        return dict(acfg.env) if acfg is not None else {}

    # --- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every loop to finish."""
        self._stop.set()
        for rt in self.agents.values():
            rt.wake.set()

    @property
    def fatal(self) -> str | None:
        """Why routing stopped for good (tmux server gone), if it did."""
        return self._fatal

    async def run(
        self,
        *,
        until: t.Callable[[], bool] | None = None,
    ) -> None:
        """Route until :meth:`stop`, a fatal error, or ``until()`` turns true.

        Raises
        ------
        ServerNotRunning
            When the tmux server died; every active task is failed with that message first.
        """
        await self.recover()
        loops = [
            asyncio.create_task(self._agent_loop(rt), name=f"agent-{rt.name}")
            for rt in self.agents.values()
        ]
        # Woken by commits (any process) instead of a timer; see politerm.store.watch.
        watch = StoreWatch(self.store.path)
        await watch.start()
        self._events = EventCursor(self.store)
        try:
            while not self._stop.is_set():
                committed = watch.event()
                await self._tick()
                if self._fatal is not None:
                    break
                if until is not None and until():
                    break
                bound = SCAN_EVERY if self._in_flight else IDLE_TICK
                await wait_any(self._stop, committed, timeout=bound)
                self._next_scan = 0.0 if committed.is_set() else self._next_scan
        finally:
            await watch.close()
            self.stop()
            for task in loops:
                task.cancel()
            for task in loops:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._fatal is not None:
            raise ServerNotRunning(self._fatal)

    # --- recovery -------------------------------------------------------------------------

    async def recover(self) -> None:
        """Settle deliveries a previous router left half-done (``kill -9`` mid-delivery)."""
        for msg in self.store.in_flight():
            rt = self.agents.get(msg.recipient)
            if rt is None:
                continue
            try:
                snap = await rt.pane.snapshot()
            except (PaneNotFound, TmuxLookupError, ControlModeError):
                continue
            verdict = await self._was_submitted(rt, msg, snap)
            if verdict == "delivered":
                self.store.transition(
                    msg.id,
                    MessageState.DELIVERED,
                    expect=MessageState.DELIVERING,
                    evidence="recovered: the agent shows the prompt was submitted",
                )
                self._event("recovered", msg, detail="delivery confirmed after restart")
            else:
                self.store.transition(
                    msg.id,
                    MessageState.QUEUED,
                    expect=MessageState.DELIVERING,
                    error="recovered: the prompt never reached the agent",
                )
                self._event("recovered", msg, detail="not delivered before the restart; re-queued")

    async def _was_submitted(self, rt: AgentRuntime, msg: Message, snap: Snapshot) -> str:
        reading = rt.profile.detect(snap)
        if reading.state in (AgentState.BUSY, AgentState.WAITING_APPROVAL):
            return "delivered"
        if reading.input_text:
            # Our paste is sitting in the input box: submit it now instead of pasting twice.
            await rt.pane.send_keys(rt.profile.submit_key)
            return "delivered"
        turn = self.store.current_turn(rt.name)
        if turn is None or turn.nonce != msg.turn_nonce:
            return "queued"
        lines = await self._turn_lines(rt, turn, snap)
        text = "\n".join(lines)
        if msg.turn_nonce and msg.turn_nonce in text:
            return "delivered"
        return "queued"

    # --- the loops ------------------------------------------------------------------------

    async def _agent_loop(self, rt: AgentRuntime) -> None:
        while not self._stop.is_set() and not rt.dead:
            output = rt.pane.output_event()
            rt.wake.clear()
            try:
                await self._step(rt)
            except (PaneNotFound, ControlModeError) as exc:
                log.warning("agent %s: %s", rt.name, exc)
                if not await self._server_alive(rt):
                    return
            except ServerNotRunning as exc:
                self._server_gone(str(exc))
                return
            except TmuxLookupError as exc:
                # tmux did not answer in time; look again at the next wake-up.
                log.warning("agent %s: %s", rt.name, exc)
            except Exception:  # a crashed agent loop would silently stop routing to it
                log.exception("agent %s: routing step failed; retrying", rt.name)
                self.store.add_event("error", agent=rt.name, detail="routing step failed")
                await asyncio.sleep(0.5)
            waiters = [
                asyncio.create_task(output.wait()),
                asyncio.create_task(rt.wake.wait()),
            ]
            try:
                await asyncio.wait(
                    waiters, timeout=self._sleep_for(rt), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for w in waiters:
                    w.cancel()
            await asyncio.sleep(0)  # let the other loops run between bursts

    def _sleep_for(self, rt: AgentRuntime) -> float:
        # Output, a store change, tmux's pane-death notification or the router's own wake
        # call end every sleep; the bound only covers what no event announces.
        if rt.turn_nonce is None:
            return IDLE_BACKSTOP
        if rt.state is AgentState.READY:
            return IDLE_GRACE / 3  # an answer without a block shows as silence
        return TURN_BACKSTOP

    async def _server_alive(self, rt: AgentRuntime) -> bool:
        client = rt.pane.client
        if client.dead_reason is not None:
            self._server_gone(client.dead_reason)
            return False
        return True

    async def _step(self, rt: AgentRuntime) -> None:
        snap = await rt.pane.snapshot()
        rt.last_screen = snap.lines
        now = time.monotonic()
        reading = rt.track.update(snap, now)
        if reading.state is AgentState.EXITED:
            self._agent_died(rt, reading.evidence)
            return
        self._record_state(rt, reading)
        if reading.state is AgentState.WAITING_APPROVAL:
            await self._on_approval(rt, snap, now)
        elif rt.approval_asked and reading.state is not AgentState.UNKNOWN:
            # A redraw frame (UNKNOWN) is not an answer; a definite other state is.
            self._approval_gone(rt)
        turn = self.store.current_turn(rt.name)
        rt.turn_nonce = turn.nonce if turn else None
        if turn is not None:
            rt.last_nonce = turn.nonce
            await self._scan_turn(rt, turn, snap)
            turn = self.store.current_turn(rt.name)
            rt.turn_nonce = turn.nonce if turn else None
        elif rt.tail is not None:
            # The turn was answered on screen; the transcript may still be catching up, and
            # its copy of the block is cross-checked when it arrives.
            nonce = rt.last_nonce if self._nonce_required else None
            self._transcript_blocks(rt, nonce)
        if turn is not None and self._idle_without_block(rt, turn, now):
            self._answered_without_block(rt, turn, snap)
            turn = self.store.current_turn(rt.name)
        if rt.state is not AgentState.READY:
            return
        msg = self.store.next_queued(rt.name)
        if msg is None:
            return
        if turn is not None and msg.type not in ("nudge", "retry"):
            return  # one prompt at a time: wait for this turn's block
        await self._deliver(rt, msg, turn, snap)

    def _record_state(self, rt: AgentRuntime, reading: StateReading) -> None:
        # The tracker latches READY until we send input, so redraws do not flap it.
        previous, rt.state = rt.state, reading.state
        if reading.state is AgentState.STUCK and previous is not AgentState.STUCK:
            turn = self.store.current_turn(rt.name)
            self.store.add_event(
                "stuck",
                task_id=turn.task_id if turn else None,
                agent=rt.name,
                detail=f"{rt.name} is stuck ({reading.rule}): " + " | ".join(reading.evidence),
            )
        with contextlib.suppress(StoreError):
            agent = self.store.get_agent(rt.name)
            if agent is not None and agent.state != rt.state.value:
                self.store.set_agent_state(rt.name, rt.state.value)

    # --- approvals ------------------------------------------------------------------------

    async def _on_approval(self, rt: AgentRuntime, snap: Snapshot, now: float) -> None:
        """Answer a tool-permission question by the run's policy, or wait for the user."""
        if rt.approval_screen is not None and (
            now - rt.approval_at < 0.3
            or (snap.lines == rt.approval_screen and now - rt.approval_at < APPROVAL_HOLD)
        ):
            return  # our keys were just pressed; the agent has not redrawn yet
        request = rt.profile.approval_request(snap)
        if request is None:
            return
        turn = self.store.current_turn(rt.name)
        task_id = turn.task_id if turn else None
        what = describe(request)
        verdict = self.policy.decide(request)
        decision, by, reason = verdict.decision, "policy", verdict.reason
        if decision is None:
            pending = get_pending(self.store, rt.name)
            if pending is None or pending.command != request.command:
                set_pending(
                    self.store,
                    PendingApproval(
                        rt.name, request.tool, request.command, request.evidence, time.time()
                    ),
                )
                rt.approval_asked = True
                self.store.add_event(
                    "approval-asked",
                    task_id=task_id,
                    agent=rt.name,
                    detail=f"{rt.name} asks to run {what}: answer with "
                    f"`poli approve {rt.name}` or `poli approve {rt.name} --deny`",
                    data={
                        "tool": request.tool,
                        "command": request.command,
                        "evidence": list(request.evidence),
                    },
                )
                return
            if pending.answer is None:
                rt.approval_asked = True
                return
            decision, by, reason = pending.answer, "user", "answered with `poli approve`"
        spec = rt.profile.approval
        keys = spec.approve if decision is Decision.APPROVE else spec.deny
        await rt.pane.send_keys(*keys)
        rt.approval_screen, rt.approval_at = snap.lines, now
        if rt.approval_asked or by == "user":
            clear_pending(self.store, rt.name)
            rt.approval_asked = False
        done = "approved" if decision is Decision.APPROVE else "denied"
        self.store.add_event(
            "approval",
            task_id=task_id,
            agent=rt.name,
            detail=f"{done} {what} for {rt.name} ({by}: {reason}; keys {'+'.join(keys)})",
            data={
                "decision": decision.value,
                "by": by,
                "reason": reason,
                "tool": request.tool,
                "command": request.command,
                "keys": list(keys),
                "evidence": list(request.evidence),
            },
        )

    def _approval_gone(self, rt: AgentRuntime) -> None:
        """The question we asked the user about left the screen without our keys."""
        rt.approval_asked = False
        pending = get_pending(self.store, rt.name)
        if pending is None:
            return
        clear_pending(self.store, rt.name)
        turn = self.store.current_turn(rt.name)
        self.store.add_event(
            "approval-gone",
            task_id=turn.task_id if turn else None,
            agent=rt.name,
            detail=f"{rt.name}'s question about {pending.what} was answered in its pane",
        )

    # --- reading blocks -------------------------------------------------------------------

    async def _turn_lines(self, rt: AgentRuntime, turn: Turn, snap: Snapshot) -> list[str]:
        if snap.alternate_screen or turn.start_line < 0:
            return list(snap.lines)
        start = turn.start_line - snap.history_size
        if start >= 0:
            return list(snap.lines[start:])
        return await rt.pane.capture(start=start, end="-")

    async def _scan_turn(self, rt: AgentRuntime, turn: Turn, snap: Snapshot) -> None:
        lines = await self._turn_lines(rt, turn, snap)
        # Without a nonce, position keeps echoes out: only what follows the prompt's echo.
        after = after_prompt(lines, self._turn_prompt(turn))
        if self._poliseed:
            lines = lines[after:]
        parser = rt.parser
        nonce = turn.nonce if self._nonce_required else None
        parser.expect_nonce(nonce)
        before = len(parser.rejections)
        for block in parser.scan_screen(lines):
            if block.nonce is None:
                block = dataclasses.replace(block, nonce=turn.nonce)  # this turn's, by position
            key = (block.nonce, block.type, block.id)
            rt.screen_blocks[key] = block
            self._cross_check(rt, key)
            if self.store.current_turn(rt.name) is not None:
                self._handle_block(rt, turn, block)
        accepted = self._nonceless(rt, turn, snap, lines, after) if nonce else set()
        for block in self._transcript_blocks(rt, nonce):
            if self.store.current_turn(rt.name) is not None:
                # The screen lost or mangled it (scrolled off an alternate screen, say):
                # the transcript still has it.
                self._handle_block(rt, turn, block)
        for rej in parser.rejections[before:]:
            if rej.line in accepted:
                continue
            self.store.add_event(
                "rejected",
                task_id=turn.task_id,
                agent=rt.name,
                detail=f"line {rej.line}: {rej.reason}",
            )

    def _turn_prompt(self, turn: Turn) -> str | None:
        msg = self.store.get_message(turn.message_id) if turn.message_id else None
        return msg.text if msg is not None else None

    def _nonceless(
        self, rt: AgentRuntime, turn: Turn, snap: Snapshot, lines: list[str], after: int
    ) -> set[int]:
        """Accept blocks that dropped the nonce, when provably this turn's (with a warning).

        Provably: printed after the turn's prompt (after its start line on the normal
        screen, or on a redrawn screen after the echo of this turn's prompt) and carrying the
        turn's task id. Returns their line numbers in the scanned lines, whose missing-nonce
        rejections are then not reported.
        """
        if snap.alternate_screen or turn.start_line < 0:
            echo = last_prompt_line(lines, self._turn_prompt(turn))
            if echo < 0:
                return set()
            after = max(after, echo + 1)
        lines_seen: set[int] = set()
        for block in nonceless(lines[after:], turn.task_id):
            bound = dataclasses.replace(block, nonce=turn.nonce)
            key = (bound.nonce, bound.type, bound.id)
            lines_seen.add(block.line + after)
            if key in rt.screen_blocks:
                continue
            rt.screen_blocks[key] = bound
            self.store.add_event(
                "warning",
                task_id=turn.task_id,
                agent=rt.name,
                detail=f"accepted a {block.type} block without a nonce: it follows the turn's "
                f"prompt and carries task id {block.id}",
            )
            if self.store.current_turn(rt.name) is not None:
                self._handle_block(rt, turn, bound)
        return lines_seen

    def _transcript_blocks(self, rt: AgentRuntime, nonce: str | None) -> list[Block]:
        """New blocks from the agent's own transcript file, if its profile names one."""
        spec = rt.profile.transcript
        if spec is None or rt.cwd is None:
            return []
        if rt.tail is None:
            path = locate_transcript(spec, rt.cwd, rt.env)
            if path is None:
                return []
            rt.tail = TranscriptTail(path, spec.format)
        rt.tparser.expect_nonce(nonce)
        fresh = []
        for block in rt.tail.feed(rt.tparser):
            key = (block.nonce, block.type, block.id)
            rt.transcript_blocks[key] = block
            self._cross_check(rt, key)
            if key not in rt.screen_blocks:
                fresh.append(block)
        return fresh

    def _cross_check(self, rt: AgentRuntime, key: tuple[str | None, str, str]) -> None:
        screen, raw = rt.screen_blocks.get(key), rt.transcript_blocks.get(key)
        if screen is None or raw is None or key in rt.checked:
            return
        rt.checked.add(key)
        check = cross_check(screen, raw)
        turn_task = raw.id if self.store.get_task(raw.id) else None
        if check.agree:
            self.store.add_event(
                "cross-check",
                task_id=turn_task,
                agent=rt.name,
                detail=f"{raw.type} block: screen and transcript agree",
            )
        else:
            self.store.add_event(
                "drift",
                task_id=turn_task,
                agent=rt.name,
                detail=f"{raw.type} block differs from the transcript: "
                + "; ".join(check.mismatches),
            )

    def _handle_block(self, rt: AgentRuntime, turn: Turn, block: Block) -> None:
        """Apply a block's effects in one transaction; each is idempotent on the block's key."""
        with self.store.batch():
            self._apply_block(rt, turn, block)

    def _apply_block(self, rt: AgentRuntime, turn: Turn, block: Block) -> None:
        key = block.dedupe_key
        if block.type == "status" and _status_of(block.id, turn.task_id):
            # A status block with its own id (<task>-status-N): the turn's task's progress.
            first = self.store.record_block(
                agent=rt.name, task_id=turn.task_id, type=block.type, msg_id=block.id,
                nonce=block.nonce, dedupe_key=key, header=block.header, body=block.body,
                accepted=True, reason=None,
            )  # fmt: skip
            if first:
                self.store.add_event(
                    "block",
                    task_id=turn.task_id,
                    agent=rt.name,
                    detail=f"{rt.name} → {block.to}: status ({block.id})",
                    data={"type": block.type, "to": block.to, "body": block.body},
                )
            return
        task = self.store.get_task(block.id)
        if task is None or (turn.task_id is not None and block.id != turn.task_id):
            why = "unknown task id" if task is None else f"belongs to task {turn.task_id}"
            self.store.record_block(
                agent=rt.name, task_id=turn.task_id, type=block.type, msg_id=block.id,
                nonce=block.nonce, dedupe_key=key, header=block.header, body=block.body,
                accepted=False, reason=f"id {block.id!r}: {why}",
            )  # fmt: skip
            self.store.add_event(
                "rejected",
                task_id=turn.task_id,
                agent=rt.name,
                detail=f"block id {block.id}: {why}",
            )
            return
        first = self.store.record_block(
            agent=rt.name, task_id=task.id, type=block.type, msg_id=block.id, nonce=block.nonce,
            dedupe_key=key, header=block.header, body=block.body, accepted=True, reason=None,
        )  # fmt: skip
        if first:
            self.store.add_event(
                "block",
                task_id=task.id,
                agent=rt.name,
                detail=f"{rt.name} → {block.to}: {block.type}",
                data={"type": block.type, "to": block.to, "body": block.body},
            )
        if task.state not in ACTIVE:
            self._end_turn(rt, turn)
            return
        if block.type == "status":
            return  # recorded and shown, never forwarded; the turn goes on
        if block.type == "question":
            self.store.update_task(task.id, state=TaskState.WAITING_USER, question=block.body)
            self.store.clear_expectation(task.id)
            self.store.set_meta(f"asker:{task.id}", rt.name)
            self._ack_turn(turn)
            self._end_turn(rt, turn)
            return
        target = self._agent_named(block.to)
        if block.type in FINAL_TYPES and (target is None or block.to.upper() in USER_TARGETS):
            self.store.update_task(task.id, state=TaskState.DONE, report=block.body)
            self.store.clear_expectation(task.id)
            self.store.add_event("done", task_id=task.id, agent=rt.name, detail=block.body)
            self._ack_turn(turn)
            self._end_turn(rt, turn)
            return
        if target is None or target == rt.name:
            self.store.add_event(
                "rejected",
                task_id=task.id,
                agent=rt.name,
                detail=f"block to {block.to!r}: no such agent",
            )
            return
        kind = block.type if block.type in ("plan", "result") else "message"
        if kind == "plan":
            rounds = sum(1 for m in self.store.list_messages(task_id=task.id) if m.type == "plan")
            if rounds >= task.max_rounds and self.store.find_message(f"{key}:{target}") is None:
                self._finish_round_limit(rt, turn, task)
                return
        fwd = self.store.add_message(
            task_id=task.id,
            sender=rt.name,
            recipient=target,
            type=kind,
            msg_id=task.id,
            body=block.body,
            header=block.header,
            nonce=block.nonce,
            dedupe_key=f"{key}:{target}",
            ttl=self.config.routing.message_ttl,
        )
        rounds = sum(1 for m in self.store.list_messages(task_id=task.id) if m.type == "plan")
        state = TaskState.EXECUTING if target == EXECUTER else TaskState.PLANNING
        self.store.update_task(task.id, state=state, round=rounds)
        self._expect(task.id, target, "result" if kind == "plan" else "plan")
        if fwd is not None:
            self.store.add_event(
                "queued", task_id=task.id, agent=target, detail=f"{rt.name} → {target}: {kind}"
            )
        self._ack_turn(turn)
        self._end_turn(rt, turn)
        self.agents[target].wake.set()

    def _finish_round_limit(self, rt: AgentRuntime, turn: Turn, task: Task) -> None:
        limit = task.max_rounds
        self.store.update_task(
            task.id,
            state=TaskState.FAILED,
            error=f"round limit {limit} reached: {rt.name} sent plan {limit + 1} "
            f"for task {task.id}",
        )
        self.store.clear_expectation(task.id)
        self.store.add_event("failed", task_id=task.id, agent=rt.name, detail="round limit reached")
        self._ack_turn(turn)
        self._end_turn(rt, turn)

    def _idle_without_block(self, rt: AgentRuntime, turn: Turn, now: float) -> bool:
        if rt.state is not AgentState.READY or turn.message_id is None:
            return False
        msg = self.store.get_message(turn.message_id)
        if msg is None or msg.state is not MessageState.DELIVERED:
            return False
        return now - rt.track.ready_since >= IDLE_GRACE and (
            rt.track.busy_seen or time.time() - turn.started >= IDLE_GRACE * 2
        )

    def _answered_without_block(self, rt: AgentRuntime, turn: Turn, snap: Snapshot) -> None:
        msg = self.store.get_message(turn.message_id) if turn.message_id else None
        task = self.store.get_task(turn.task_id) if turn.task_id else None
        if msg is None or task is None or task.state not in ACTIVE:
            return
        if rt.name == PLANNER and msg.type == "result":
            # A planner that goes quiet after a result, with no block, has reported in prose.
            report = _screen_report(snap, rt, msg.text)
            with self.store.batch():
                self.store.update_task(task.id, state=TaskState.DONE, report=report)
                self.store.clear_expectation(task.id)
                self.store.add_event(
                    "done",
                    task_id=task.id,
                    agent=rt.name,
                    detail="planner went idle: screen is the report",
                )
                self._ack_turn(turn)
                self._end_turn(rt, turn)

    # --- delivering -----------------------------------------------------------------------

    async def _deliver(
        self, rt: AgentRuntime, msg: Message, turn: Turn | None, snap: Snapshot
    ) -> None:
        task = self.store.get_task(msg.task_id) if msg.task_id else None
        if task is not None and task.state not in ACTIVE:
            self.store.transition(msg.id, MessageState.DEAD, error=f"task {task.state.value}")
            return
        follow_up = msg.type in ("nudge", "retry") and turn is not None
        # A STRANDED attempt left the text (with its nonce) in the input box: submit that,
        # do not paste it again.
        stranded = bool(
            (msg.last_error or "").startswith(Outcome.STRANDED.value)
            and msg.text
            and msg.turn_nonce
            and rt.profile.input_text(snap)
        )
        if stranded and msg.turn_nonce:
            nonce = msg.turn_nonce
        else:
            nonce = turn.nonce if follow_up and turn is not None else new_nonce()
        text = msg.text if msg.text and msg.turn_nonce == nonce else self._render(msg, nonce)
        with self.store.batch():
            msg = self.store.transition(
                msg.id,
                MessageState.DELIVERING,
                expect={MessageState.QUEUED, MessageState.RETRIED},
                turn_nonce=nonce,
                text=text,
            )
            if not follow_up:
                start = -1 if snap.alternate_screen else snap.history_size + snap.cursor_y
                self.store.start_turn(
                    rt.name, nonce=nonce, task_id=msg.task_id, message_id=msg.id, start_line=start
                )
        if not follow_up:
            rt.turn_nonce = nonce
        rt.track.input_sent()  # the ready latch ends with our input
        rt.state = rt.track.state
        result = await deliver(rt.pane, text, rt.profile, already_pasted=stranded)
        evidence = " | ".join(result.evidence)
        if result.outcome is Outcome.DELIVERED or (
            result.outcome is Outcome.BLOCKED and result.submitted
        ):
            self.store.transition(
                msg.id, MessageState.DELIVERED, expect=MessageState.DELIVERING, evidence=evidence
            )
            self._event(
                "delivered",
                msg,
                detail=f"{msg.sender} → {msg.recipient}: {msg.type} "
                f"({result.submits} submit, {result.elapsed * 1000:.0f} ms)",
            )
            return
        if result.outcome is Outcome.AGENT_EXITED:
            self.store.transition(
                msg.id, MessageState.RETRIED, expect=MessageState.DELIVERING, error="agent exited"
            )
            self._agent_died(rt, result.evidence)
            return
        # STRANDED, or BLOCKED before submitting: try again later, then dead-letter.
        if not follow_up:
            self.store.end_turn(rt.name, nonce)
            rt.turn_nonce = None
        if msg.attempts >= self.config.routing.max_attempts:
            self.store.transition(
                msg.id,
                MessageState.DEAD,
                expect=MessageState.DELIVERING,
                error=f"{result.outcome.value} after {msg.attempts} attempts: {result.rule}",
                evidence=evidence,
            )
            self._event("dead-letter", msg, detail=f"{result.outcome.value}: {evidence}")
            if task is not None:
                self._fail(
                    task.id,
                    f"could not deliver the {msg.type} message to {rt.name} "
                    f"({result.outcome.value}: {result.rule}); last screen: {evidence}",
                )
            return
        self.store.transition(
            msg.id,
            MessageState.RETRIED,
            expect=MessageState.DELIVERING,
            error=f"{result.outcome.value}: {result.rule}",
            evidence=evidence,
        )
        self._event("retry", msg, detail=f"{result.outcome.value}: {evidence}")

    def _render(self, msg: Message, nonce: str) -> str:
        task = self.store.get_task(msg.task_id) if msg.task_id else None
        name = msg.type if msg.type in self.templates.texts else "message"
        return self.templates.render(
            name,
            msg_id=msg.msg_id,
            nonce=nonce,
            body=msg.body,
            request=task.request if task else "",
            sender=msg.sender,
            recipient=msg.recipient,
            msg_type=msg.type,
            file_ref=f"msgs/{msg.msg_id}-{nonce}.md",
        )

    # --- the store tick: new tasks, deadlines, aborts -------------------------------------

    async def _tick(self) -> None:
        version = self.store.data_version()
        now = time.monotonic()
        if version != self._data_version:
            # Another process committed: wake only the loops it gave something to do.
            self._data_version = version
            for name in agents_with_work(self.store, self.agents, self._events.read()):
                self.agents[name].wake.set()
        elif now < self._next_scan:
            return
        self._next_scan = now + SCAN_EVERY
        active = self.store.list_tasks(active_only=True)
        self._in_flight = bool(active) or bool(self.store.list_expectations())
        for task in active:
            if task.state is TaskState.PENDING:
                self._start_task(task)
        self._check_deadlines(time.time())
        for msg in self.store.expire_messages(time.time()):
            self._event("dead-letter", msg, detail="ttl expired")

    def _start_task(self, task: Task) -> None:
        with self.store.batch():
            self._queue_task(task)
        self.agents[PLANNER].wake.set()

    def _queue_task(self, task: Task) -> None:
        self.store.add_message(
            task_id=task.id,
            sender="USER",
            recipient=PLANNER,
            type="task",
            msg_id=task.id,
            body=task.request,
            header={},
            dedupe_key=f"task:{task.id}",
            ttl=self.config.routing.message_ttl,
        )
        self.store.update_task(task.id, state=TaskState.PLANNING)
        self._expect(task.id, PLANNER, "plan")
        self.store.add_event(
            "queued", task_id=task.id, agent=PLANNER, detail="USER → PLANNER: task"
        )

    def _expect(self, task_id: str, sender: str, typ: str) -> None:
        self.store.set_expectation(
            task_id, sender=sender, type=typ, deadline=time.time() + self._step_timeout(sender)
        )

    def _step_timeout(self, agent: str) -> float:
        timeouts = self.config.timeouts
        return timeouts.plan if agent == PLANNER else timeouts.exec

    def _check_deadlines(self, now: float) -> None:
        for exp in self.store.list_expectations():
            task = self.store.get_task(exp.task_id)
            if task is None or task.state not in ACTIVE:
                self.store.clear_expectation(exp.task_id)
                continue
            total = self._step_timeout(exp.sender)
            started = exp.deadline - total
            step = "plan" if exp.sender == PLANNER else "exec"
            if not exp.nudged and now >= started + total * self.config.timeouts.nudge_fraction:
                self.store.mark_nudged(exp.task_id)
                self._follow_up(task, exp.sender, "nudge")
                continue
            if now < exp.deadline:
                continue
            retries = int(self.store.get_meta(f"retries:{task.id}:{exp.sender}") or 0)
            if retries < 1:
                self.store.set_meta(f"retries:{task.id}:{exp.sender}", str(retries + 1))
                self.store.set_expectation(
                    task.id, sender=exp.sender, type=exp.type, deadline=now + total, nudged=True
                )
                self._follow_up(task, exp.sender, "retry")
                continue
            rt = self.agents.get(exp.sender)
            screen = " | ".join(_tail(rt.last_screen if rt else (), 6))
            self._fail(
                task.id,
                f"{exp.sender} sent no {exp.type} block for task {task.id} in the {step} step "
                f"within {total:g}s (nudged and retried){self._rejected_note(task.id)}; "
                f"last on its screen: {screen}",
            )

    def _rejected_note(self, task_id: str) -> str:
        """The blocks rejected for a task, named for its failure message."""
        events = self.store.list_events(task_id=task_id, limit=200)
        rejected = [e.detail for e in events if e.kind == "rejected"]
        if not rejected:
            return ""
        shown = "; ".join(dict.fromkeys(rejected))
        return f"; rejected blocks: {shown[:600]}"

    def _follow_up(self, task: Task, agent: str, kind: str) -> None:
        n = int(self.store.get_meta(f"{kind}s:{task.id}:{agent}") or 0) + 1
        self.store.set_meta(f"{kind}s:{task.id}:{agent}", str(n))
        msg = self.store.add_message(
            task_id=task.id,
            sender="POLI",
            recipient=agent,
            type=kind,
            msg_id=task.id,
            body="",
            header={},
            dedupe_key=f"{kind}:{task.id}:{agent}:{task.round}:{n}",
            ttl=self._step_timeout(agent),
        )
        if msg is not None:
            self.store.add_event(kind, task_id=task.id, agent=agent, detail=f"{kind} {agent}")
        rt = self.agents.get(agent)
        if rt is not None:
            rt.wake.set()

    # --- endings --------------------------------------------------------------------------

    def _ack_turn(self, turn: Turn) -> None:
        if turn.message_id is None:
            return
        msg = self.store.get_message(turn.message_id)
        if msg is not None and msg.state is MessageState.DELIVERED:
            self.store.transition(msg.id, MessageState.ACKNOWLEDGED, expect=MessageState.DELIVERED)

    def _end_turn(self, rt: AgentRuntime, turn: Turn) -> None:
        self.store.end_turn(rt.name, turn.nonce)
        rt.turn_nonce = None
        # Follow-ups for a turn that is over are moot.
        for m in self.store.list_messages(recipient=rt.name, task_id=turn.task_id):
            if m.type in ("nudge", "retry") and m.state in (
                MessageState.QUEUED,
                MessageState.RETRIED,
            ):
                self.store.transition(m.id, MessageState.DEAD, error="turn already answered")

    def _fail(self, task_id: str, why: str, *, resumable: TaskState | None = None) -> None:
        task = self.store.get_task(task_id)
        if task is None or task.state not in (*ACTIVE, TaskState.WAITING_USER):
            return
        with self.store.batch():
            if resumable is not None:
                self.store.set_meta(f"{RESUME_META}{task_id}", resumable.value)
            self.store.update_task(task_id, state=TaskState.FAILED, error=why)
            self.store.clear_expectation(task_id)
            self.store.add_event("failed", task_id=task_id, detail=why)
        log.error("task %s failed: %s", task_id, why)

    def _agent_died(self, rt: AgentRuntime, evidence: tuple[str, ...]) -> None:
        if rt.dead:
            return
        rt.dead = True
        rt.state = AgentState.EXITED
        with contextlib.suppress(StoreError):
            self.store.set_agent_state(rt.name, AgentState.EXITED.value)
        screen = " | ".join(evidence)
        self.store.add_event("agent-exited", agent=rt.name, detail=screen)
        for task in self.store.list_tasks(active_only=True):
            if task.state is TaskState.PENDING:
                continue
            exp = self.store.get_expectation(task.id)
            turn = self.store.current_turn(rt.name)
            involved = (exp is not None and exp.sender == rt.name) or (
                turn is not None and turn.task_id == task.id
            )
            if involved:
                step = "plan" if rt.name == PLANNER else "exec"
                self._fail(
                    task.id,
                    f"agent {rt.name} exited during the {step} step of task {task.id} "
                    f"({screen}); run `poli up --resume` to restart it and continue",
                    resumable=task.state,
                )

    def _server_gone(self, why: str) -> None:
        if self._fatal is not None:
            return
        self._fatal = why
        for task in self.store.list_tasks(active_only=True):
            self._fail(
                task.id,
                f"the tmux server is gone ({why}); run `poli up --resume` to restart the agents "
                "and continue",
                resumable=task.state if task.state is not TaskState.PENDING else None,
            )
        self.stop()

    def _agent_named(self, name: str) -> str | None:
        upper = name.upper()
        for agent in self.agents:
            if agent.upper() == upper:
                return agent
        return None

    def _event(self, kind: str, msg: Message, *, detail: str) -> None:
        self.store.add_event(kind, task_id=msg.task_id, agent=msg.recipient, detail=detail)


def _tail(lines: t.Sequence[str], n: int) -> list[str]:
    return [ln.strip() for ln in lines if ln.strip()][-n:]


def _screen_report(snap: Snapshot, rt: AgentRuntime, prompt: str | None = None) -> str:
    """The agent's words since its last prompt, as the report of a block-less answer."""
    lines = [ln.rstrip() for ln in snap.lines]
    start = max(last_prompt_line(lines) + 1, after_prompt(lines, prompt))
    body: list[str] = []
    for line in lines[start:]:
        # The input box (a rule, then the input line) closes the reply.
        if rt.profile.is_input_line(line) or (len(line) > 10 and set(line) <= {"─", "▄", "▀"}):
            break
        body.append(line)
    return "\n".join(ln for ln in body if ln.strip())[-8000:].strip()
