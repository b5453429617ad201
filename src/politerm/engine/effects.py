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
from politerm.engine import decide
from politerm.engine.routebase import ACTIVE, PLANNER, USER_TARGETS
from politerm.protocol.contract import after_prompt, status_task
from politerm.protocol.parser import last_prompt_line
from politerm.store.models import MessageState, TaskState, TurnEnd, TurnState

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, Observation
    from politerm.engine.deadlines import Deadlines
    from politerm.engine.routebase import Endings, Routing
    from politerm.engine.sending import Sending
    from politerm.protocol.block import Block
    from politerm.store.models import Task, Turn
    from politerm.terminal import Snapshot

# An agent idle this long after a prompt, with no block, has answered without one.
IDLE_GRACE = 1.5
# States in which a turn's answer must wait: the agent still works, or asks something.
_NOT_IDLE = frozenset({AgentState.BUSY, AgentState.WAITING_APPROVAL, AgentState.DIALOG})
_APPROVAL_RETURN = "approval-return:"


class BlockEffects:
    """Reading a turn's blocks and carrying out their actions (the router's effects).

    Parameters
    ----------
    routing
        The router's shared state.
    endings
        Ends the turns the blocks answer, and the tasks they finish.
    deadlines
        Sets the clock of the step a forwarded block starts.
    sending
        Begins a forwarded prompt's delivery in the block's own commit.
    """

    def __init__(
        self, routing: Routing, endings: Endings, deadlines: Deadlines, sending: Sending
    ) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.endings, self.deadlines, self.sending = endings, deadlines, sending

    async def scan_turn(self, driver: AgentDriver, turn: Turn, obs: Observation) -> None:
        """Read the blocks of ``driver``'s open turn and carry out their effects."""
        loop = self.routing.loops[driver.name]
        if loop.held_nonce != turn.nonce:
            loop.held, loop.held_nonce = [], turn.nonce
        prompt = self._turn_prompt(driver.name, turn)
        window = Window(
            turn.start_line,
            turn.nonce,
            prompt,
            turn.task_id,
            self.routing.nonce_required,
            self.routing.poliseed,
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
                handed = self.apply_block(driver.name, current, block, ready=ready)
            if ready is not None and not handed:
                self.store.sync()

    def _turn_prompt(self, name: str, turn: Turn) -> str | None:
        # A message's text is set when it goes DELIVERING, with the turn's nonce: read once.
        loop, key = self.routing.loops[name], (turn.nonce, turn.message_id)
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

    def approval_task_state(self, driver: AgentDriver, task: Task, obs: Observation) -> None:
        """A question waiting for the user shows on the task, and goes when answered."""
        pending = driver.pending_approval if obs.state is AgentState.WAITING_APPROVAL else None
        asking = None
        if pending is not None:
            asking = (
                f"{driver.name} asks {pending.asks}: answer with "
                f"`poli approve {driver.approval_key}` (or --deny)"
            )
        waiting, unknown = (
            obs.state is s for s in (AgentState.WAITING_APPROVAL, AgentState.UNKNOWN)
        )
        match decide.approval_change(task.state, asking, waiting, unknown):
            case decide.AwaitApproval(question=question):
                with self.store.batch():
                    self.store.set_meta(f"{_APPROVAL_RETURN}{task.id}", task.state.value)
                    self.store.update_task(
                        task.id, state=TaskState.WAITING_APPROVAL, question=question
                    )
            case decide.Approved():
                back = self.store.get_meta(f"{_APPROVAL_RETURN}{task.id}")
                state = TaskState(back or TaskState.PLANNING.value)
                self.store.update_task(task.id, state=state, clear=("question",))

    async def _recipient_ready(self, name: str, block: Block) -> Snapshot | None:
        """The screen of the agent ``block`` is forwarded to, if it can take it right now.

        Ready: idle (as last looked at), no turn of its own, nothing left over to settle
        or clear, no delivery already handed to it, and the router not stopping. The
        screen is reused when nothing was printed since it was taken.
        """
        target = self.routing.agent_named(block.to)
        if target is None or target == name or block.to.upper() in USER_TARGETS:
            return None
        if target in self.routing.remote:
            return None  # its node types it (engine/remote.py)
        if self.routing.stopping.is_set():
            return None  # no loop is left to type it (a stopping router's last look)
        driver, loop = self.routing.agents[target], self.routing.loops[target]
        if (
            driver.dead
            or driver.state is not AgentState.READY
            or not loop.settled
            or loop.handoff is not None
            or loop.turn_nonce is not None
            or target in self.routing.clear_later
        ):
            return None
        snap = await driver.look()
        if snap is None or driver.profile.detect(snap).state is not AgentState.READY:
            return None
        return snap

    def apply_block(
        self, name: str, turn: Turn, block: Block, *, ready: Snapshot | None = None
    ) -> bool:
        """Apply one block's effects (inside a batch); True when a delivery was begun."""
        own_status = block.type == "status" and status_task(block.id, turn.task_id)
        task = None if own_status else self.store.get_task(block.id)
        target = self.routing.agent_named(block.to)
        forwarded, rounds = False, 0
        if task is not None and target is not None and task.state in ACTIVE:
            rounds = self.store.count_messages(task.id, "plan")
            if block.type == "plan" and rounds >= task.max_rounds:
                forwarded = self.store.find_message(f"{block.dedupe_key}:{target}") is not None
        facts = decide.BlockFacts(
            agent=name,
            agents=self.routing.names,
            turn_task=turn.task_id,
            own_status=own_status,
            task=decide.TaskFacts(task.id, task.state, task.max_rounds) if task else None,
            rounds=rounds,
            forwarded=forwarded,
        )
        handed = False
        for action in decide.block_effects(facts, block):
            handed = self._carry_block(name, turn, block, action, task, facts, ready) or handed
        return handed

    def _carry_block(
        self,
        name: str,
        turn: Turn,
        block: Block,
        action: decide.BlockAction,
        task: Task | None,
        facts: decide.BlockFacts,
        ready: Snapshot | None,
    ) -> bool:
        """Carry out one action of a block (inside its batch); True when a delivery was begun."""
        match action:
            case decide.Record(task_id=task_id, accepted=accepted, reason=reason):
                first = self.store.record_block(
                    agent=name, task_id=task_id, type=block.type, msg_id=block.id,
                    nonce=block.nonce, dedupe_key=block.dedupe_key, header=block.header,
                    body=block.body, accepted=accepted, reason=reason,
                )  # fmt: skip
                if first and accepted:
                    own = f" ({block.id})" if task is None else ""
                    self.store.add_event(
                        "block",
                        task_id=task_id,
                        agent=name,
                        detail=f"{name} → {block.to}: {block.type}{own}",
                        data={"type": block.type, "to": block.to, "body": block.body},
                    )
            case decide.Rejected(task_id=task_id, detail=detail):
                self.store.add_event("rejected", task_id=task_id, agent=name, detail=detail)
            case decide.EndAnswered():
                self.endings.end_turn(name, turn)
            case decide.Ask(question=question) if task is not None:
                self.store.update_task(task.id, state=TaskState.WAITING_USER, question=question)
                self.store.clear_expectation(task.id)
                self.store.set_meta(f"asker:{task.id}", name)
                self._answered(name, turn)
            case decide.Done(report=report) if task is not None:
                self.store.update_task(task.id, state=TaskState.DONE, report=report)
                self.store.clear_expectation(task.id)
                self.store.add_event("done", task_id=task.id, agent=name, detail=report)
                self._answered(name, turn)
            case decide.RoundLimit(why=why) if task is not None:
                self.store.update_task(task.id, state=TaskState.FAILED, error=why)
                self.store.clear_expectation(task.id)
                self.store.add_event(
                    "failed", task_id=task.id, agent=name, detail="round limit reached"
                )
                self._answered(name, turn)
                self.endings.end_task_turns(task.id, TurnEnd.TASK_ENDED)
            case decide.Forward() if task is not None:
                return self._forward(name, turn, block, action, task, facts.rounds, ready)
        return False

    def _answered(self, name: str, turn: Turn) -> None:
        """The block answered the turn: its prompt is acknowledged and the turn ends."""
        self.endings.ack_turn(turn)
        self.endings.end_turn(name, turn)

    def _forward(
        self,
        name: str,
        turn: Turn,
        block: Block,
        fw: decide.Forward,
        task: Task,
        rounds: int,
        ready: Snapshot | None,
    ) -> bool:
        target = fw.target
        fwd = self.store.add_message(
            task_id=task.id,
            sender=name,
            recipient=target,
            type=fw.kind,
            msg_id=task.id,
            body=block.body,
            header=block.header,
            nonce=block.nonce,
            dedupe_key=f"{block.dedupe_key}:{target}",
            ttl=self.config.routing.message_ttl,
        )
        rounds += fw.kind == "plan" and fwd is not None  # the plan just added (not a re-read)
        task = self.store.update_task(task.id, state=fw.state, round=rounds, clear=("question",))
        self.deadlines.expect(task.id, target, fw.expect)
        if fwd is not None:
            self.store.add_event(
                "queued", task_id=task.id, agent=target, detail=f"{name} → {target}: {fw.kind}"
            )
        self._answered(name, turn)
        handed = False
        if ready is not None and fwd is not None and self.store.current_turn(target) is None:
            first_in_line = self.store.next_queued(target)
            if first_in_line is not None and first_in_line.id == fwd.id:
                handed = self.sending.hand_off(target, fwd, ready, task)
        self.routing.wake(target)
        return handed

    def idle_without_block(self, driver: AgentDriver, turn: Turn, now: float) -> bool:
        """Whether the agent has gone quiet after its prompt without printing a block."""
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

    def answered_without_block(self, driver: AgentDriver, turn: Turn, snap: Snapshot) -> None:
        """A turn answered in prose: a planner's answer to a result is the task's report."""
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
                self.endings.ack_turn(turn)
                self.endings.end_turn(driver.name, turn)


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
