"""What every part of the router shares (:class:`Routing`), and how things end (:class:`Endings`).

The router is composed, not inherited: :class:`Routing` holds the store, the agents and
their loops' state; :class:`Endings`, :class:`~politerm.engine.deadlines.Deadlines`,
:class:`~politerm.engine.sending.Sending` and :class:`~politerm.engine.effects.BlockEffects`
each get what they use, and :class:`~politerm.engine.router.Router` wires them together.

Endings are where a routed task can wedge an agent, so they live in one place: a turn ends
(with a :class:`~politerm.store.turns.TurnEnd` reason) on every path that finishes it —
answered, task failed or timed out or aborted, agent died, message dead-lettered — and the
follow-ups queued for it die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import typing as t

from politerm.agents.approval import ApprovalPolicy
from politerm.agents.state import AgentState
from politerm.driver import AgentDriver
from politerm.driver.launch import agent_env
from politerm.driver.limits import driver_settings
from politerm.engine import decide
from politerm.engine.decide import (
    ACTIVE,
    EXECUTER,
    FINAL_TYPES,
    FOLLOW_UPS,
    PLANNER,
    USER_TARGETS,
    FailTask,
    Involvement,
)
from politerm.engine.templates import Templates
from politerm.errors import StoreError
from politerm.protocol.contract import Contract, nonce_required
from politerm.store.models import MessageState, TaskState, TurnEnd

if t.TYPE_CHECKING:
    from politerm.agents.profile import AgentProfile
    from politerm.config import Config
    from politerm.driver import Pane
    from politerm.protocol.block import Block
    from politerm.store import RunStore
    from politerm.store.models import Message, Turn

log = logging.getLogger(__name__)

__all__ = [
    "ACTIVE",
    "EXECUTER",
    "FINAL_TYPES",
    "FOLLOW_UPS",
    "PLANNER",
    "RESUME_META",
    "RESUME_MSG",
    "USER_TARGETS",
    "Endings",
    "Routing",
]

RESUME_META = "resume-state:"
RESUME_MSG = "resume-message:"

AgentSpec = tuple["AgentProfile", "Pane"] | AgentDriver


def attach_driver(
    config: Config,
    store: RunStore,
    policy: ApprovalPolicy,
    name: str,
    profile: AgentProfile,
    pane: Pane,
) -> AgentDriver:
    """A driver for configured agent ``name`` running in ``pane`` (a router's, a node's)."""
    acfg = config.agents.get(name)
    # Long bodies come as files in the agent's working directory; nowhere else.
    cwd = pathlib.Path(acfg.cwd).expanduser().resolve() if acfg is not None else None
    env = agent_env(name, acfg, profile) if acfg is not None else {}
    return AgentDriver(
        name,
        profile,
        pane,
        store=store,
        policy=policy,
        cwd=cwd,
        env=env,
        **driver_settings(config),
    )


@dataclasses.dataclass(frozen=True)
class Begun:
    """A delivery written to the store (DELIVERING, its turn open) and not typed yet."""

    msg: Message
    nonce: str
    text: str
    stranded: bool = False
    follow_up: bool = False


@dataclasses.dataclass
class LoopState:
    """What one agent's routing loop keeps between steps (the store holds the rest)."""

    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    turn_nonce: str | None = None
    last_nonce: str | None = None
    settled: bool = False
    # Blocks that answer the turn but wait until the agent is idle (the parser shows each
    # block once, so they are kept here); the turn's nonce they belong to.
    held: list[Block] = dataclasses.field(default_factory=list)
    held_nonce: str | None = None
    # A delivery a block's commit began for this agent, for its own loop to type.
    handoff: Begun | None = None
    # When this loop last saw a turn open (monotonic), for the transcript's catch-up.
    turn_seen: float = 0.0
    # The open turn's prompt as typed, by (turn nonce, message id): fixed once it is begun.
    prompt: tuple[tuple[str, int | None], str | None] | None = None
    # When (monotonic) a delivery that ended STRANDED or BLOCKED is tried again: the loop
    # wakes for it even when the agent shows nothing new (it ignored the key).
    retry_at: float | None = None


class Routing:
    """The router's shared state: its agents and their loops, the store, and its flags.

    Parameters
    ----------
    config
        Timeouts, routing limits and the agents.
    store
        The run store (the source of truth).
    agents
        The running agents: name → driver, or name → (profile, pane) to attach one.
    templates
        The prompts.
    remote
        The agents hosted on other nodes of the fleet (their turns go through its queue).
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        agents: t.Mapping[str, AgentSpec],
        *,
        templates: Templates | None = None,
        remote: t.Collection[str] = (),
    ) -> None:
        self.config = config
        self.store = store
        self.templates = templates or Templates(contract=config.routing.contract)
        self.nonce_required = nonce_required(config.routing.require_nonce, config.routing.contract)
        self.poliseed = config.routing.contract == Contract.POLISEED.value
        self.policy = ApprovalPolicy.of(config.routing.approval, config.routing.approval_patterns)
        self.agents: dict[str, AgentDriver] = {
            name: spec if isinstance(spec, AgentDriver) else self._attach(name, *spec)
            for name, spec in agents.items()
        }
        # Agents hosted on other nodes of the fleet: no driver here (engine/remote.py).
        self.remote = frozenset(remote) - set(self.agents)
        self.loops = {name: LoopState() for name in self.names}
        self.stopping = asyncio.Event()
        # Why routing stopped for good (tmux server gone), if it did.
        self.fatal: str | None = None
        # Agents whose input box holds a dead-lettered prompt, to be cleared.
        self.clear_later: set[str] = set()
        self.dead: set[str] = set()

    def _attach(self, name: str, profile: AgentProfile, pane: Pane) -> AgentDriver:
        return attach_driver(self.config, self.store, self.policy, name, profile, pane)

    @property
    def names(self) -> tuple[str, ...]:
        """Every agent routed: those driven here, then those hosted on other nodes."""
        return (*self.agents, *sorted(self.remote))

    def wake(self, name: str) -> None:
        """Wake one agent's loop."""
        loop = self.loops.get(name)
        if loop is not None:
            loop.wake.set()

    def stop(self) -> None:
        """Ask every loop to finish (a step under way completes first)."""
        self.stopping.set()
        for loop in self.loops.values():
            loop.wake.set()

    def agent_named(self, name: str) -> str | None:
        """The agent called ``name`` (any case), if there is one."""
        return decide.agent_named(self.names, name)

    def event(self, kind: str, msg: Message, *, detail: str) -> None:
        """Record an event about ``msg`` (its task, its recipient)."""
        self.store.add_event(kind, task_id=msg.task_id, agent=msg.recipient, detail=detail)

    def step_timeout(self, agent: str) -> float:
        """How long ``agent``'s step (plan or exec) may take."""
        timeouts = self.config.timeouts
        return timeouts.plan if agent == PLANNER else timeouts.exec


class Endings:
    """How things end, in one place: turns, failed tasks, dead agents, a dead server.

    Parameters
    ----------
    routing
        The router's shared state.
    """

    def __init__(self, routing: Routing) -> None:
        self.routing = routing
        self.store = routing.store

    def ack_turn(self, turn: Turn) -> None:
        """The turn's prompt was answered: DELIVERED → ACKNOWLEDGED."""
        if turn.message_id is None:
            return
        msg = self.store.get_message(turn.message_id)
        if msg is not None and msg.state is MessageState.DELIVERED:
            self.store.transition(msg.id, MessageState.ACKNOWLEDGED, expect=MessageState.DELIVERED)

    def end_turn(self, name: str, turn: Turn, reason: TurnEnd = TurnEnd.ANSWERED) -> None:
        """End ``name``'s turn; the follow-ups queued for it die with it."""
        self.store.end_turn(name, turn.nonce, reason)
        driver = self.routing.agents.get(name)
        if driver is not None:
            driver.turn_ended()
        loop = self.routing.loops.get(name)
        if loop is not None and loop.turn_nonce == turn.nonce:
            loop.turn_nonce = None
        # Follow-ups for a turn that is over are moot.
        waiting = (MessageState.QUEUED, MessageState.RETRIED)
        for m in self.store.list_messages(recipient=name, task_id=turn.task_id, state=waiting):
            if m.type in FOLLOW_UPS:
                self.store.transition(m.id, MessageState.DEAD, error="turn already over")

    def end_task_turns(self, task_id: str, reason: TurnEnd, *, resumable: bool = False) -> None:
        """End every open turn of ``task_id``: a finished task never leaves an agent busy.

        Its queued messages die with it, unless the task may be resumed: then only each
        turn's own undelivered prompt does (``poli up --resume`` sends it once, as a copy).
        """
        for turn in self.store.turns_of_task(task_id):
            self.end_turn(turn.agent, turn, reason)
            msg = self.store.get_message(turn.message_id) if turn.message_id else None
            if msg is None:
                continue
            if resumable:
                self.store.set_meta(f"{RESUME_MSG}{task_id}:{turn.agent}", str(msg.id))
            if msg.state is MessageState.DELIVERED:
                self.store.transition(msg.id, MessageState.ACKNOWLEDGED)
            elif msg.state in (MessageState.QUEUED, MessageState.RETRIED):
                self.store.transition(msg.id, MessageState.DEAD, error=f"turn {reason.value}")
        if resumable:
            return
        for m in self.store.list_messages(task_id=task_id):
            if m.state in (MessageState.QUEUED, MessageState.RETRIED, MessageState.PARSED):
                self.store.transition(m.id, MessageState.DEAD, error=f"task {task_id} ended")

    def fail(
        self,
        task_id: str,
        why: str,
        *,
        resumable: TaskState | None = None,
        reason: TurnEnd = TurnEnd.TASK_ENDED,
    ) -> None:
        """Fail an active task: its turns end, its queued messages die, the loops wake."""
        task = self.store.get_task(task_id)
        if task is None or task.state not in (*ACTIVE, TaskState.WAITING_USER):
            return
        with self.store.batch():
            if resumable is not None:
                self.store.set_meta(f"{RESUME_META}{task_id}", resumable.value)
            self.end_task_turns(task_id, reason, resumable=resumable is not None)
            self.store.update_task(task_id, state=TaskState.FAILED, error=why)
            self.store.clear_expectation(task_id)
            self.store.add_event("failed", task_id=task_id, detail=why)
        for name in self.routing.names:
            self.routing.wake(name)
        log.error("task %s failed: %s", task_id, why)

    def agent_died(self, name: str, evidence: t.Sequence[str]) -> None:
        """The agent exited: mark it, and fail (resumably) the tasks it had."""
        if name in self.routing.dead:
            return
        self.routing.dead.add(name)
        if name in self.routing.agents:
            self.routing.agents[name].mark_exited()
        with contextlib.suppress(StoreError):
            if self.store.get_agent(name) is not None:
                self.store.set_agent_state(name, AgentState.EXITED.value)
        screen = " | ".join(evidence)
        self.store.add_event("agent-exited", agent=name, detail=screen)
        turn = self.store.current_turn(name)
        for failure in decide.tasks_of_dead_agent(
            name, screen, turn.task_id if turn else None, self.involvements()
        ):
            self.carry_fail(failure)

    def involvements(self) -> list[Involvement]:
        """The active tasks, with the agent each one's step waits for."""
        out = []
        for task in self.store.list_tasks(active_only=True):
            exp = (
                self.store.get_expectation(task.id) if task.state is not TaskState.PENDING else None
            )
            out.append(Involvement(task.id, task.state, exp.sender if exp else None))
        return out

    def carry_fail(self, failure: FailTask) -> None:
        """Carry out a decided failure."""
        self.fail(failure.task_id, failure.why, resumable=failure.resumable, reason=failure.reason)

    def server_gone(self, why: str) -> None:
        """The tmux server died: fail (resumably) every started task and stop routing."""
        if self.routing.fatal is not None:
            return
        self.routing.fatal = why
        for failure in decide.server_gone_failures(why, self.involvements()):
            self.carry_fail(failure)
        self.routing.stop()
