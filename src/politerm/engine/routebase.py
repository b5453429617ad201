"""What every part of the router shares: :class:`Routing`, its agents and their loops' state.

The router is composed, not inherited: :class:`Routing` holds the store, the agents and
their loops' state; :class:`~politerm.engine.execute.Executor` (every side effect),
:class:`~politerm.engine.deadlines.Deadlines`, :class:`~politerm.engine.sending.Sending`
and :class:`~politerm.engine.effects.BlockEffects` each get what they use, and
:class:`~politerm.engine.router.Router` wires them together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing as t

from politerm.driver import AgentDriver
from politerm.engine import decide
from politerm.engine.decide import PLANNER
from politerm.engine.templates import Templates
from politerm.protocol.contract import Contract, nonce_required

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.engine.fleetbudget import RouterBreaker
    from politerm.protocol.block import Block
    from politerm.store import RunStore
    from politerm.store.models import Message

__all__ = ["RESUME_META", "RESUME_MSG", "Begun", "LoopState", "Routing"]

RESUME_META = "resume-state:"
RESUME_MSG = "resume-message:"


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
        The running agents' drivers by name (a session's come from
        :func:`~politerm.driver.sessionagent.session_driver`).
    templates
        The prompts.
    remote
        The agents hosted on other nodes of the fleet (their turns go through its queue).
    gate
        Asked before a new turn of an agent driven here is typed (the fleet's budget).
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        agents: t.Mapping[str, AgentDriver],
        *,
        templates: Templates | None = None,
        remote: t.Collection[str] = (),
        gate: RouterBreaker | None = None,
    ) -> None:
        self.config = config
        self.gate = gate
        self.store = store
        self.templates = templates or Templates(contract=config.routing.contract)
        self.nonce_required = nonce_required(config.routing.require_nonce, config.routing.contract)
        self.poliseed = config.routing.contract == Contract.POLISEED.value
        self.agents = dict(agents)
        # Agents hosted on other nodes of the fleet: no driver here (engine/remote.py).
        self.remote = frozenset(remote) - set(self.agents)
        self.loops = {name: LoopState() for name in self.names}
        self.stopping = asyncio.Event()
        # Why routing stopped for good (tmux server gone), if it did.
        self.fatal: str | None = None
        # Agents whose input box holds a dead-lettered prompt, to be cleared.
        self.clear_later: set[str] = set()
        self.dead: set[str] = set()

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
