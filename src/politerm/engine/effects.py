"""What the router does with the blocks of a turn: each block's effects in one transaction.

A block that ends its turn (a forwarded plan or result, a final report, a question) takes
effect only when the agent is idle with no open question: an agent that prints its block
and then asks to run a command (aider's "Run shell command?") keeps the turn open — HOLDING,
and the task shows WAITING_APPROVAL naming the question — until the question is answered
and the agent is idle.
"""

from __future__ import annotations

import time
import typing as t

from politerm.agents.state import AgentState
from politerm.driver import Window
from politerm.engine.routebase import (
    ACTIVE,
    EXECUTER,
    FINAL_TYPES,
    PLANNER,
    USER_TARGETS,
    RouterBase,
)
from politerm.protocol.contract import after_prompt, status_task
from politerm.protocol.parser import last_prompt_line
from politerm.store.models import MessageState, TaskState, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, Observation
    from politerm.protocol.block import Block
    from politerm.store.models import Message, Task, Turn
    from politerm.terminal import Snapshot

# An agent idle this long after a prompt, with no block, has answered without one.
IDLE_GRACE = 1.5
# States in which a turn's answer must wait: the agent still works, or asks something.
_NOT_IDLE = frozenset({AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG})
_APPROVAL_RETURN = "approval-return:"


class BlockEffects(RouterBase):
    """Reading a turn's blocks and applying their effects (part of the router)."""

    async def _scan_turn(self, driver: AgentDriver, turn: Turn, obs: Observation) -> None:
        loop = self.loops[driver.name]
        if loop.held_nonce != turn.nonce:
            loop.held, loop.held_nonce = [], turn.nonce
        prompt = self._turn_prompt(driver.name, turn)
        window = Window(
            turn.start_line, turn.nonce, prompt, turn.task_id, self._nonce_required, self._poliseed
        )
        fresh = await driver.read_window(obs.snap, window, idle=obs.state is AgentState.READY)
        blocks, loop.held = [*loop.held, *fresh], []
        for block in blocks:
            ending = self._ends_turn(block) and obs.state not in _NOT_IDLE
            # The recipient's screen, when it is free to take the forwarded prompt at once.
            ready = await self._recipient_ready(driver.name, block) if ending else None
            current = self.store.current_turn(driver.name)
            if current is None or current.nonce != turn.nonce:
                return
            if self._ends_turn(block) and obs.state in _NOT_IDLE:
                self._hold(driver, current, block, obs)
                loop.held.append(block)
                continue
            # With a recipient ready, its prompt goes DELIVERING in this same commit, made
            # without waiting for the disk: its delivery's outcome commit is durable.
            with self.store.batch(durable=ready is None):
                driver.record_row()
                handed = self._apply_block(driver.name, current, block, ready=ready)
            if ready is not None and not handed:
                self.store.sync()

    def _turn_prompt(self, name: str, turn: Turn) -> str | None:
        # A message's text is set when it goes DELIVERING, with the turn's nonce: read once.
        loop, key = self.loops[name], (turn.nonce, turn.message_id)
        if loop.prompt is None or loop.prompt[0] != key:
            msg = self.store.get_message(turn.message_id) if turn.message_id else None
            loop.prompt = (key, msg.text if msg is not None else None)
        return loop.prompt[1]

    @staticmethod
    def _ends_turn(block: Block) -> bool:
        return block.type != "status"

    def _hold(self, driver: AgentDriver, turn: Turn, block: Block, obs: Observation) -> None:
        """The answer is in but the agent is not idle: the turn stays open (HOLDING)."""
        if turn.state is not TurnState.HOLDING:
            self.store.set_turn_state(driver.name, turn.nonce, TurnState.HOLDING)
            self.store.add_event(
                "holding",
                task_id=turn.task_id,
                agent=driver.name,
                detail=f"{block.type} block received; {driver.name} is "
                f"{obs.state.value}, so the turn stays open until it is idle",
            )

    def _approval_task_state(self, driver: AgentDriver, task: Task, obs: Observation) -> None:
        """A question waiting for the user shows on the task, and goes when answered."""
        pending = driver.pending_approval if obs.state is AgentState.WAITING_APPROVAL else None
        if pending is not None:
            if task.state is TaskState.WAITING_APPROVAL or task.state not in ACTIVE:
                return
            question = (
                f"{driver.name} asks {pending.asks}: answer with "
                f"`poli approve {driver.approval_key}` (or --deny)"
            )
            with self.store.batch():
                self.store.set_meta(f"{_APPROVAL_RETURN}{task.id}", task.state.value)
                self.store.update_task(task.id, state=TaskState.WAITING_APPROVAL, question=question)
            return
        if task.state is TaskState.WAITING_APPROVAL and obs.state not in (
            AgentState.WAITING_APPROVAL,
            AgentState.UNKNOWN,
        ):
            back = self.store.get_meta(f"{_APPROVAL_RETURN}{task.id}") or TaskState.PLANNING.value
            self.store.update_task(task.id, state=TaskState(back), clear=("question",))

    async def _recipient_ready(self, name: str, block: Block) -> Snapshot | None:
        """The screen of the agent ``block`` is forwarded to, if it can take it right now.

        Ready: idle (as last looked at), no turn of its own, nothing left over to settle
        or clear, no delivery already handed to it, and the router not stopping. The
        screen is reused when nothing was printed since it was taken.
        """
        target = self._agent_named(block.to)
        if target is None or target == name or block.to.upper() in USER_TARGETS:
            return None
        if self._stop.is_set():
            return None  # no loop is left to type it (a stopping router's last look)
        driver, loop = self.agents[target], self.loops[target]
        if (
            driver.dead
            or driver.state is not AgentState.READY
            or not loop.settled
            or loop.handoff is not None
            or loop.turn_nonce is not None
            or target in self._clear_later
        ):
            return None
        snap = await driver.look()
        if snap is None or driver.profile.detect(snap).state is not AgentState.READY:
            return None
        return snap

    def _hand_off(
        self, target: str, msg: Message, snap: Snapshot, task: Task | None = None
    ) -> bool:
        """Begin delivering ``msg`` (of ``task``) inside the current batch; its loop types it.

        Overridden by the router's sending part; False: nothing was begun.
        """
        return False

    def _wrong_address(self, name: str, block: Block, target: str | None) -> str:
        """Why a block addressed to ``target`` (None: no agent of that name) goes nowhere."""
        others = [a for a in self.agents if a != name]
        hint = {"plan": EXECUTER, "result": PLANNER}.get(block.type)
        where = (
            f"a {block.type} block goes to {hint}"
            if hint is not None and hint in self.agents
            else f"address {' or '.join([*others, 'USER'])}"
        )
        if target == name:
            return f"{name} addressed its {block.type} block to itself; {where}"
        agents = ", ".join(self.agents)
        return f"no agent is named {block.to!r} (agents: {agents}; USER); {where}"

    def _apply_block(
        self, name: str, turn: Turn, block: Block, *, ready: Snapshot | None = None
    ) -> bool:
        """Apply one block's effects (inside a batch); True when a delivery was begun."""
        key = block.dedupe_key
        if block.type == "status" and status_task(block.id, turn.task_id):
            # A status block with its own id (<task>-status-N): the turn's task's progress.
            first = self.store.record_block(
                agent=name, task_id=turn.task_id, type=block.type, msg_id=block.id,
                nonce=block.nonce, dedupe_key=key, header=block.header, body=block.body,
                accepted=True, reason=None,
            )  # fmt: skip
            if first:
                self.store.add_event(
                    "block",
                    task_id=turn.task_id,
                    agent=name,
                    detail=f"{name} → {block.to}: status ({block.id})",
                    data={"type": block.type, "to": block.to, "body": block.body},
                )
            return False
        task = self.store.get_task(block.id)
        if task is None or (turn.task_id is not None and block.id != turn.task_id):
            why = "unknown task id" if task is None else f"belongs to task {turn.task_id}"
            self.store.record_block(
                agent=name, task_id=turn.task_id, type=block.type, msg_id=block.id,
                nonce=block.nonce, dedupe_key=key, header=block.header, body=block.body,
                accepted=False, reason=f"id {block.id!r}: {why}",
            )  # fmt: skip
            self.store.add_event(
                "rejected", task_id=turn.task_id, agent=name, detail=f"block id {block.id}: {why}"
            )
            return False
        first = self.store.record_block(
            agent=name, task_id=task.id, type=block.type, msg_id=block.id, nonce=block.nonce,
            dedupe_key=key, header=block.header, body=block.body, accepted=True, reason=None,
        )  # fmt: skip
        if first:
            self.store.add_event(
                "block",
                task_id=task.id,
                agent=name,
                detail=f"{name} → {block.to}: {block.type}",
                data={"type": block.type, "to": block.to, "body": block.body},
            )
        if task.state not in ACTIVE:
            self._end_turn(name, turn)
            return False
        if block.type == "status":
            return False  # recorded and shown, never forwarded; the turn goes on
        if block.type == "question":
            self.store.update_task(task.id, state=TaskState.WAITING_USER, question=block.body)
            self.store.clear_expectation(task.id)
            self.store.set_meta(f"asker:{task.id}", name)
            self._ack_turn(turn)
            self._end_turn(name, turn)
            return False
        target = self._agent_named(block.to)
        if block.type in FINAL_TYPES and (target is None or block.to.upper() in USER_TARGETS):
            self.store.update_task(task.id, state=TaskState.DONE, report=block.body)
            self.store.clear_expectation(task.id)
            self.store.add_event("done", task_id=task.id, agent=name, detail=block.body)
            self._ack_turn(turn)
            self._end_turn(name, turn)
            return False
        if target is None or target == name:
            self.store.add_event(
                "rejected",
                task_id=task.id,
                agent=name,
                detail=f"block to {block.to!r}: {self._wrong_address(name, block, target)}",
            )
            return False
        kind = block.type if block.type in ("plan", "result") else "message"
        rounds = self.store.count_messages(task.id, "plan")
        if (
            kind == "plan"
            and rounds >= task.max_rounds
            and self.store.find_message(f"{key}:{target}") is None
        ):
            self._finish_round_limit(name, turn, task)
            return False
        fwd = self.store.add_message(
            task_id=task.id,
            sender=name,
            recipient=target,
            type=kind,
            msg_id=task.id,
            body=block.body,
            header=block.header,
            nonce=block.nonce,
            dedupe_key=f"{key}:{target}",
            ttl=self.config.routing.message_ttl,
        )
        rounds += kind == "plan" and fwd is not None  # the plan just added (not a re-read)
        state = TaskState.EXECUTING if target == EXECUTER else TaskState.PLANNING
        task = self.store.update_task(task.id, state=state, round=rounds, clear=("question",))
        self._expect(task.id, target, "result" if kind == "plan" else "plan")
        if fwd is not None:
            self.store.add_event(
                "queued", task_id=task.id, agent=target, detail=f"{name} → {target}: {kind}"
            )
        self._ack_turn(turn)
        self._end_turn(name, turn)
        handed = False
        if ready is not None and fwd is not None and self.store.current_turn(target) is None:
            first_in_line = self.store.next_queued(target)
            if first_in_line is not None and first_in_line.id == fwd.id:
                handed = self._hand_off(target, fwd, ready, task)
        self.wake(target)
        return handed

    def _expect(self, task_id: str, sender: str, typ: str) -> None:
        # The deadline is set again when the prompt is confirmed (deadlines start there).
        self.store.set_expectation(
            task_id, sender=sender, type=typ, deadline=time.time() + self._step_timeout(sender)
        )

    def _finish_round_limit(self, name: str, turn: Turn, task: Task) -> None:
        limit = task.max_rounds
        self.store.update_task(
            task.id,
            state=TaskState.FAILED,
            error=f"round limit {limit} reached: {name} sent plan {limit + 1} for task {task.id}",
        )
        self.store.clear_expectation(task.id)
        self.store.add_event("failed", task_id=task.id, agent=name, detail="round limit reached")
        self._ack_turn(turn)
        self._end_turn(name, turn)
        self._end_task_turns(task.id, TurnEnd.TASK_ENDED)

    def _idle_without_block(self, driver: AgentDriver, turn: Turn, now: float) -> bool:
        if driver.state is not AgentState.READY or turn.message_id is None:
            return False
        if driver.blocks_settling:
            return False  # a block is on screen, waiting for its second look (settle)
        msg = self.store.get_message(turn.message_id)
        if msg is None or msg.state is not MessageState.DELIVERED:
            return False
        return now - driver.ready_since >= IDLE_GRACE and (
            driver.busy_seen or time.time() - turn.started >= IDLE_GRACE * 2
        )

    def _answered_without_block(self, driver: AgentDriver, turn: Turn, snap: Snapshot) -> None:
        msg = self.store.get_message(turn.message_id) if turn.message_id else None
        task = self.store.get_task(turn.task_id) if turn.task_id else None
        if msg is None or task is None or task.state not in ACTIVE:
            return
        if driver.name == PLANNER and msg.type == "result":
            # A planner that goes quiet after a result, with no block, has reported in prose.
            report = screen_report(snap, driver, msg.text)
            with self.store.batch():
                self.store.update_task(task.id, state=TaskState.DONE, report=report)
                self.store.clear_expectation(task.id)
                self.store.add_event(
                    "done",
                    task_id=task.id,
                    agent=driver.name,
                    detail="planner went idle: screen is the report",
                )
                self._ack_turn(turn)
                self._end_turn(driver.name, turn)


_PROMPT_ENDS: t.Final = (">", "$", "#", "%", "❯", "›")


def repl_prompt(lines: t.Sequence[str]) -> str | None:
    """The input prompt an idle plain program shows on its last line (``planner>``), if any.

    Examples
    --------
    >>> repl_prompt(["Summary: done.", "planner> ", "", ""])
    'planner>'
    >>> repl_prompt(["Summary: done."]) is None
    True
    """
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return last if 0 < len(last) <= 40 and last.endswith(_PROMPT_ENDS) else None


def screen_report(snap: Snapshot, driver: AgentDriver, prompt: str | None = None) -> str:
    """The agent's words since its last prompt, as the report of a block-less answer."""
    lines = [ln.rstrip() for ln in snap.lines]
    start = max(last_prompt_line(lines) + 1, after_prompt(lines, prompt))
    # A plain program (a REPL under the generic profile) prints its input prompt after
    # each line it reads: the idle prompt's copies are not the report's words.
    idle = repl_prompt(lines)
    body: list[str] = []
    for line in lines[start:]:
        # The input box (a rule, then the input line) closes the reply.
        if driver.profile.is_input_line(line) or (len(line) > 10 and set(line) <= {"─", "▄", "▀"}):
            break
        if idle is not None and line.strip() == idle:
            continue
        body.append(line)
    return "\n".join(ln for ln in body if ln.strip())[-8000:].strip()
