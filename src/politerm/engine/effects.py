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
from politerm.engine import agentstep, decide
from politerm.engine.agentstep import NOT_IDLE
from politerm.engine.decide import ACTIVE, USER_TARGETS
from politerm.engine.execute import At
from politerm.protocol.contract import after_prompt, status_task
from politerm.protocol.parser import last_prompt_line

if t.TYPE_CHECKING:
    from politerm.driver import AgentDriver, Observation
    from politerm.engine.execute import Executor
    from politerm.engine.routebase import Routing
    from politerm.engine.sending import Sending
    from politerm.protocol.block import Block
    from politerm.store.models import Task, Turn
    from politerm.terminal import Snapshot


class BlockEffects:
    """Reading a turn's blocks and gathering what their decisions need (a part of the router).

    Parameters
    ----------
    routing
        The router's shared state.
    executor
        Carries out each block's effects, an approval shown on its task, a prose report.
    sending
        Begins a forwarded prompt's delivery in the block's own commit.
    """

    def __init__(self, routing: Routing, executor: Executor, sending: Sending) -> None:
        self.routing, self.store, self.config = routing, routing.store, routing.config
        self.executor, self.sending = executor, sending

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
            ending = self._ends_turn(block) and obs.state not in NOT_IDLE
            # The recipient's screen, when it is free to take the forwarded prompt at once.
            ready = await self._recipient_ready(driver.name, block) if ending else None
            current = self.store.current_turn(driver.name)
            if current is None or current.nonce != turn.nonce:
                return
            if self._ends_turn(block) and obs.state in NOT_IDLE:
                self.executor.hold(driver.name, current, block, obs.state)
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
        change = decide.approval_change(task.state, asking, waiting, unknown)
        if change is not None:
            self.executor.carry((change,), At(driver.name, task=task))

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
        driver, loop = self.routing.agents[target], self.routing.loops[target]
        recipient = agentstep.Recipient(
            dead=driver.dead,
            state=driver.state,
            settled=loop.settled,
            handed=loop.handoff is not None,
            turn_open=loop.turn_nonce is not None,
            clear_pending=target in self.routing.clear_later,
            stopping=self.routing.stopping.is_set(),
        )
        if not agentstep.takes_handoff(recipient):
            return None
        gate = self.routing.gate
        if gate is not None and not await gate.admit(target, block.id, handoff=True):
            return None  # held back: the prompt is queued, and typed when the gate allows
        return await driver.ready_look()

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
        at = At(name, turn=turn, task=task, block=block, rounds=rounds)
        fwd = self.executor.carry(decide.block_effects(facts, block), at)
        if ready is None or fwd is None or self.store.current_turn(fwd.recipient) is not None:
            return False
        first_in_line = self.store.next_queued(fwd.recipient)
        if first_in_line is None or first_in_line.id != fwd.id:
            return False
        return self.sending.hand_off(fwd.recipient, fwd, ready, task)

    def answered_silently(self, driver: AgentDriver, turn: Turn, snap: Snapshot) -> None:
        """A turn answered in prose: a planner's answer to a result is the task's report."""
        msg = self.store.get_message(turn.message_id) if turn.message_id else None
        task = self.store.get_task(turn.task_id) if turn.task_id else None
        silence = agentstep.Silence(
            state=driver.state,
            settling=driver.blocks_settling,
            prompt_state=msg.state if msg is not None else None,
            idle_for=time.monotonic() - driver.ready_since,
            busy_seen=driver.busy_seen,
            turn_age=time.time() - turn.started,
            agent=driver.name,
            prompt_kind=msg.type if msg is not None else "",
            task_state=task.state if task is not None else None,
        )
        if msg is None or not agentstep.answered_in_prose(silence):
            return
        # A planner that goes quiet after a result, with no block, has reported in prose.
        done = decide.Done(screen_report(snap, driver, msg.text))
        detail = "planner went idle: screen is the report"
        self.executor.carry((done,), At(driver.name, turn=turn, task=task, detail=detail))


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
