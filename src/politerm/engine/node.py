"""``poli node``: one machine's part of a fleet — its agents, driven for work claimed from Redis.

A node hosts the agents whose ``[agents.X] node`` (or ``nodes``, a pool) names it. It
claims work only for those, one piece per agent at a time, and does it only through the
driver: a turn is one :func:`~politerm.driver.turn.run_turn` on the agent's
:class:`~politerm.driver.AgentDriver`, in its own tmux session (``<session>-node``) of this
machine's private tmux server, started on the first work for it (a pool agent is started
where its work is claimed).

Each prompt is typed under the claim's lease. The driver writes the prompt's row in the
journal of turns first; then, right before the paste (the driver's ``before-paste`` point),
and again right before the submit key (``before-submit``), the node renews the lease and
writes it on that row (work, node, epoch, expiry): a lease that is lost or fenced (another
node re-claimed the work, with a higher epoch) raises, and nothing is typed, or the pasted
text is not submitted — not the prompt, not a nudge. The lease is renewed in the background
while the turn runs. The turn's outcome is recorded in the journal (by ``run_turn``), and
only then reported to the queue (``complete``: the queue acknowledges the stream entry
after it accepted the outcome). A result the queue rejects — the attempt was fenced
meanwhile — is recorded on the row as ``rejected`` with the queue's reason, and an event
says so.

Before a turn is started the fleet's budget breaker is asked. A cap reached pauses the
work instead (``park``: its attempt undone, nothing typed, the router still waiting) and
the agent's turns are not claimed here until the breaker, asked every
:data:`BUDGET_LOOK` seconds, allows one again (a cap raised or cleared, a reset, the next
day): then the same work is claimed and typed, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import typing as t

from politerm._internal.aio import wait_event
from politerm.agents.approval import Decision, answer_pending, get_pending
from politerm.agents.state import AgentState
from politerm.driver import Expect, Outcome, run_turn
from politerm.driver.idle import wait_idle
from politerm.driver.observer import Observer
from politerm.driver.tokens import stored_tokens
from politerm.engine.fleetboard import BoardPublisher
from politerm.engine.letters import MESSAGE_KIND
from politerm.engine.nodelease import UNREACHABLE_BACKOFF, Attempts
from politerm.engine.placement import hosted_here, node_config
from politerm.engine.session import Session
from politerm.engine.turnwork import (
    ANSWER_KIND,
    TURN_KIND,
    TurnReply,
    TurnWork,
    answer_stream,
    answered_agent,
)
from politerm.errors import FleetError, PolitermError
from politerm.protocol.block import MessageType
from politerm.protocol.usage import Usage

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.agents.approval import PendingApproval
    from politerm.config import Config
    from politerm.driver import AgentDriver, TurnResult
    from politerm.engine.letters import Letter, Letters
    from politerm.engine.nodelease import Attempt
    from politerm.fleet.board import Board
    from politerm.fleet.budget import FleetBudget
    from politerm.fleet.nodes import NodeQueue
    from politerm.fleet.work import Lease
    from politerm.store import RunStore

log = logging.getLogger(__name__)

#: Longest one claim call waits for work (the node's loop looks at its stop flag between).
CLAIM_WAIT = 1.0
#: How often a node asks the fleet's budget whether an agent's paused work may go on.
BUDGET_LOOK = 2.0
#: Seconds a message's receiver must stay ready before its turn counts as over.
FOLLOW_SETTLE = 1.0
#: Block types that answer a loop turn (a status block is shown, never an answer).
ANSWERS: t.Final = frozenset(m.value for m in MessageType) - {MessageType.STATUS.value}


class Node:
    """One machine's node: claims work for the agents it hosts and drives them.

    Parameters
    ----------
    config
        The project's configuration (``[fleet]`` names this node).
    store
        This machine's run store (the journal of turns).
    queue
        The fleet's queue.
    budget
        The fleet-wide budget breaker: asked before each turn starts, told what it spent.
    letters
        The messaging side: messages to hosted agents are typed only with it.
    board
        The agents' board: the node publishes its agents' states there, for the views of
        every node (:mod:`politerm.engine.fleetboard`).
    """

    def __init__(
        self,
        config: Config,
        store: RunStore,
        queue: NodeQueue,
        budget: FleetBudget | None = None,
        letters: Letters | None = None,
        board: Board | None = None,
    ) -> None:
        if config.fleet is None:
            msg = "poli node needs a [fleet] table in poli.toml (url, node): see docs/fleet.md"
            raise FleetError(msg)
        self.config, self.store, self.queue, self.budget = config, store, queue, budget
        self.letters = letters
        self.name = config.fleet.node
        self.agents = hosted_here(config, self.name)
        self.session = Session(node_config(config, self.agents), store)
        self.drivers: dict[str, AgentDriver] = {}
        self.busy: dict[str, asyncio.Task[None]] = {}
        self.attempts = Attempts(store, queue.queue, self.name, config.fleet.lease)
        self.stopping = asyncio.Event()
        # Agents whose turns a budget cap paused, with the breaker's reason: their turn
        # streams are not claimed until the cap allows a turn again.
        self.paused: dict[str, str] = {}
        self._resumed = asyncio.Event()
        self._starting = asyncio.Lock()  # one bring-up at a time (it holds the session's lock)
        # What tmux says of the agents' panes: an agent that exits between turns (no turn
        # looks at it) shows as exited on the board at once.
        self.observer = Observer.of(self.session.config)
        self.publisher = (
            None
            if board is None
            else BoardPublisher(
                store,
                board,
                self.name,
                self.agents,
                self.session.config.tmux.session,
                every=config.fleet.heartbeat,
                observer=self.observer,
            )
        )

    async def run(self) -> None:
        """Claim and run work until :meth:`stop`; the turns under way finish first."""
        beat = asyncio.create_task(self._heartbeats(), name="node-heartbeat")
        looks = asyncio.create_task(self._budget_looks(), name="node-budget")
        publish = asyncio.Event()  # set when the node stops: the publisher's last look
        publishing = (
            None
            if self.publisher is None
            else asyncio.create_task(self.publisher.run(publish), name="node-board")
        )
        try:
            while not self.stopping.is_set():
                # Answers to an agent's question are claimed while its turn runs.
                streams = [*self.agents, *map(answer_stream, self.agents)]
                free = [a for a in streams if a not in self.busy and a not in self.paused]
                if not free:
                    await self._wait_for_a_free_agent()
                    continue
                try:
                    lease = await asyncio.to_thread(self._claim, free)
                except FleetError as exc:
                    log.warning("node %s: claiming: %s", self.name, exc)
                    await wait_event(self.stopping, UNREACHABLE_BACKOFF)
                    continue
                if lease is None:
                    continue
                agent = lease.work.agent
                self.busy[agent] = asyncio.create_task(self._work(lease), name=f"work-{agent}")
                self.busy[agent].add_done_callback(self._freed)
        finally:
            if self.busy:
                await asyncio.wait(list(self.busy.values()))
            for task in (beat, looks):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            publish.set()
            if publishing is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(publishing, UNREACHABLE_BACKOFF * 3)
            await self.observer.close()
            await self.session.host.close()

    def _freed(self, task: asyncio.Task[None]) -> None:
        for agent, running in list(self.busy.items()):
            if running is task:
                del self.busy[agent]

    def _claim(self, agents: list[str]) -> Lease | None:
        return self.queue.claim(agents, block=CLAIM_WAIT)

    def stop(self) -> None:
        """Claim nothing more (the work under way finishes)."""
        self.stopping.set()

    async def _wait_for_a_free_agent(self) -> None:
        self._resumed.clear()
        stop = asyncio.ensure_future(self.stopping.wait())
        resumed = asyncio.ensure_future(self._resumed.wait())
        waiters = [stop, resumed, *self.busy.values()]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        resumed.cancel()

    async def _budget_looks(self) -> None:
        """Ask the budget, for each paused agent, whether its turns may go on."""
        if self.budget is None:
            return
        while True:
            await asyncio.sleep(BUDGET_LOOK)
            for agent in list(self.paused):
                try:
                    verdict = await asyncio.to_thread(self.budget.peek, agent)
                except FleetError as exc:
                    log.warning("node %s: asking the budget for %s: %s", self.name, agent, exc)
                    continue
                if verdict.ok:
                    self.paused.pop(agent, None)
                    why = f"the fleet's budget allows {agent}'s turns again: its work goes on"
                    self.store.add_event("budget-resumed", agent=agent, detail=why)
                    self._resumed.set()

    async def _pause(self, lease: Lease, reason: str) -> None:
        """A budget cap stopped ``lease``'s turn before anything was typed: park the work.

        The agent's turns are not claimed here until :meth:`_budget_looks` finds the cap
        allows one again; the work stays queued (its attempt undone), so whichever node
        of its pool claims it then types it, and the router that posted it still waits.
        """
        agent = lease.work.agent
        self.paused[agent] = reason
        self.store.add_event("budget-paused", agent=agent, detail=f"{lease.work.id}: {reason}")
        try:
            await asyncio.to_thread(self.queue.queue.park, lease, reason)
        except FleetError as exc:
            # Its lease runs out instead: the work is claimed again as a new attempt.
            log.warning("node %s: pausing %s: %s", self.name, lease, exc)

    async def _heartbeats(self) -> None:
        assert self.config.fleet is not None
        every = self.config.fleet.heartbeat
        while True:
            load = {
                "busy": sorted(a for a in self.busy if answered_agent(a) is None),
                "pid": os.getpid(),
                # Agents whose turns wait for the fleet's budget, with the breaker's reason.
                "paused": dict(self.paused),
                # What waits for a person here: `poli approve AGENT` on any node answers it.
                "approvals": {
                    name: d.pending_approval.what
                    for name, d in self.drivers.items()
                    if d.pending_approval is not None
                },
            }
            try:
                await asyncio.to_thread(self.queue.heartbeat, self.agents, load)
            except FleetError as exc:
                log.warning("node %s: heartbeat: %s", self.name, exc)
            await asyncio.sleep(every)

    # --- one piece of work ------------------------------------------------------------------

    async def _work(self, lease: Lease) -> None:
        work = lease.work
        asker = answered_agent(work.agent)
        if asker is not None and work.kind.value == ANSWER_KIND:
            await self.attempts.complete(lease, self._answer(asker, work.payload))
            return
        turn: TurnWork | None = None
        if work.kind.value == TURN_KIND:
            try:
                turn = TurnWork.from_payload(work.id, work.agent, work.payload)
            except PolitermError as exc:
                bad = TurnReply(False, "blocked", error=str(exc), node=self.name, epoch=lease.epoch)
                await self.attempts.complete(lease, bad.payload())
                return
        elif work.kind.value != MESSAGE_KIND or self.letters is None:
            # Other kinds (bridge tasks) are done by their own workflows.
            await self.attempts.complete(
                lease, {"error": f"{work.kind.value} work is not run by nodes"}
            )
            return
        if await self._over_budget(lease):
            return
        try:
            driver = await self._driver(work.agent)
        except PolitermError as exc:
            # The agent would not start here: another attempt (maybe on another node) may.
            log.warning("node %s: %s: %s", self.name, lease, exc)
            with contextlib.suppress(FleetError):
                await asyncio.to_thread(self.queue.queue.give_back, lease, str(exc))
            return
        if turn is not None:
            reply = await self._turn(driver, turn, lease)
        else:
            reply = await self._message(driver, lease)
        if reply is not None:
            await self.attempts.complete(lease, reply.payload())

    async def _over_budget(self, lease: Lease) -> bool:
        """Whether the fleet's budget stops ``lease``'s work (then it is paused, or let run out).

        Asked before the agent is started: work the budget stops needs no agent here. A
        message counts as a turn: it starts one in the agent that receives it.
        """
        if self.budget is None:
            return False
        agent = lease.work.agent
        try:
            verdict = await asyncio.to_thread(self.budget.admit, agent)
        except FleetError as exc:
            # Nothing typed, nothing proved: the lease runs out and the work is claimed
            # again (the claim loop backs off while Redis does not answer).
            log.warning("node %s: %s: asking the budget: %s", self.name, lease, exc)
            return True
        if not verdict.ok:
            await self._pause(lease, verdict.reason)
        return not verdict.ok

    async def _message(self, driver: AgentDriver, lease: Lease) -> TurnReply | None:
        """A message for a hosted agent: its copy written here, then typed under the lease."""
        assert self.letters is not None
        work = lease.work
        try:
            letter = self.letters.take(work.id, work.agent, work.payload)
        except PolitermError as exc:
            return TurnReply(False, "invalid", error=str(exc), node=self.name, epoch=lease.epoch)
        if letter.earlier is not None:
            # An earlier attempt here got it in (this node died before it reported).
            return TurnReply(True, "delivered", error=letter.earlier, node=self.name,
                             epoch=lease.epoch)  # fmt: skip
        return await self._letter(driver, letter, lease)

    def _answer(self, agent: str, payload: Mapping[str, t.Any]) -> dict[str, t.Any]:
        """An approval given on another node: recorded here, where the agent's driver reads it."""
        try:
            decision = Decision(str(payload.get("decision")))
            origin = str(payload.get("by") or "another node")
            stale = _stale(get_pending(self.store, agent), payload)
            if stale is not None:
                return {"error": stale, "stale": True, "node": self.name}
            pending = answer_pending(self.store, agent, decision, by=f"{origin} via {self.name}")
        except (ValueError, PolitermError) as exc:
            return {"error": str(exc), "node": self.name}
        return {"answered": pending.answered(decision), "node": self.name}

    async def _driver(self, agent: str) -> AgentDriver:
        """The agent's driver here; the agent is started first when it does not run."""
        driver = self.drivers.get(agent)
        if driver is not None and not driver.dead:
            return driver
        config = node_config(self.config, [agent])
        session = Session(config, self.store, self.session.host)
        async with self._starting:
            # Reuses a live agent's pane; starts (or restarts) it otherwise.
            found = await session.up(resume=True, primers=True)
        driver = found[agent]
        driver.on("before-paste", lambda: self.attempts.check(agent))
        # Again before the submit key: a node stopped between its paste and the key (a
        # pause, a starved machine) must not submit once its lease ran out.
        driver.on("before-submit", lambda: self.attempts.check(agent))
        self.drivers[agent] = driver
        return driver

    async def _turn(self, driver: AgentDriver, turn: TurnWork, lease: Lease) -> TurnReply | None:
        spent = stored_tokens(self.store, f"agent:{turn.agent}")
        result: TurnResult | None = None
        async with self.attempts.leased(turn.agent, lease) as attempt:
            if not await self._idle(driver, attempt, turn.timeout):
                return None
            result = await run_turn(
                driver,
                turn.text,
                Expect(frozenset(turn.answers) or ANSWERS, turn.task_id),
                timeout=turn.timeout,
                nonce=turn.nonce,
                task_id=turn.task_id,
                serves=attempt.serves,
            )
        if result is None:
            return None  # fenced before a paste
        if self.budget is not None:
            now = stored_tokens(self.store, f"agent:{turn.agent}")
            used = Usage(now.input - spent.input, now.output - spent.output)
            with contextlib.suppress(FleetError):
                await asyncio.to_thread(self.budget.charge, turn.agent, used)
        return _reply(result, self.name, attempt.lease.epoch)

    async def _letter(self, driver: AgentDriver, letter: Letter, lease: Lease) -> TurnReply | None:
        """A message typed under the lease like a turn, its receiver's turn followed to its end.

        The lease is held while the receiver works on it (and a READONLY request's policy
        holds), so no other attempt is live meanwhile; the reply says whether it got in.
        """
        reply: TurnReply | None = None
        async with self.attempts.leased(driver.name, lease) as attempt:
            if not await self._idle(driver, attempt, letter.ttl):
                return None
            base = driver.policy
            driver.policy = letter.policy or base
            try:
                result = await driver.deliver(
                    letter.text, serves=attempt.serves, nonce=letter.mail_id
                )
                where = f"on node {self.name} (epoch {attempt.lease.epoch})"
                if result.got_in:
                    assert self.letters is not None
                    self.letters.delivered(letter, f"delivered {where}")
                    over = await self._follow(driver, letter.ttl)
                    driver.end_turn(result.turn_id, over)
                    if over == "exited":
                        self.letters.ended(letter, f"receiver {driver.name} exited {where}")
                    reply = TurnReply(True, over, node=self.name, epoch=attempt.lease.epoch)
                else:
                    why = f"{result.outcome.value} {where}: {' | '.join(result.evidence)}"
                    if result.outcome is Outcome.AGENT_EXITED:
                        assert self.letters is not None
                        self.letters.ended(letter, why)
                    else:
                        await driver.clear_input()
                    reply = TurnReply(
                        False, result.outcome.value, error=why, node=self.name,
                        epoch=attempt.lease.epoch,
                    )  # fmt: skip
            finally:
                driver.policy = base
        return reply

    async def _follow(self, driver: AgentDriver, bound: float) -> str:
        """The receiver's turn followed until it is idle again (or exits); how it ended."""
        obs = await wait_idle(driver, bound, settle=FOLLOW_SETTLE)
        if obs.state is AgentState.EXITED:
            return "exited"
        return "idle" if obs.state is AgentState.READY else "expired"

    async def _idle(self, driver: AgentDriver, attempt: Attempt, timeout: float) -> bool:
        """Whether the agent is idle; if not, the attempt is given back (nothing typed).

        An agent still busy with an earlier attempt (its node restarted and claimed the
        work again) is not typed into: two attempts never run in it at once.
        """
        look = await wait_idle(driver, timeout)
        if look.state is AgentState.READY:
            return True
        why = f"{driver.name} not idle within {timeout:g}s ({look.state.value})"
        with contextlib.suppress(FleetError):
            await asyncio.to_thread(self.queue.queue.give_back, attempt.lease, why)
        return False


def _stale(pending: PendingApproval | None, payload: Mapping[str, t.Any]) -> str | None:
    """Why an answer naming a question (``asked``, ``command``) does not fit the open one.

    An answer naming none (``poli approve AGENT``) answers whatever is open.

    Examples
    --------
    >>> _stale(None, {"asked": 1.0}), _stale(None, {})
    ('no approval question open any more', None)
    """
    if "asked" not in payload:
        return None
    if pending is None:
        return "no approval question open any more"
    if pending.asked != payload["asked"] or pending.command != payload.get("command", ""):
        return f"the open question is now {pending.what!r}, not the one shown"
    if pending.answer is not None:
        return f"the question was already answered: {pending.answer.value}"
    return None


def _reply(result: TurnResult, node: str, epoch: int) -> TurnReply:
    delivery = result.delivery
    # Not got_in alone: a prompt whose Enter went in counts as delivered even when the
    # driver could not prove it landed (stranded, or the agent exited after the submit).
    # Else the router would post it again as new work and a node would type it a second
    # time, with no box to settle first across machines; the turn ends with the driver's
    # words instead, and the task fails visibly.
    delivered = delivery is None or delivery.got_in or delivery.submitted
    outcome = result.outcome.value if delivered else delivery.outcome.value  # type: ignore[union-attr]
    return TurnReply(delivered, outcome, result.blocks, result.error, node, epoch)
