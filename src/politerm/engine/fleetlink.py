"""The engine's side of the fleet's queue (:mod:`politerm.fleet`): a router's post of turns.

Imported only when ``[fleet]`` is configured, so a project without one never needs redis-py.
The queue's payloads and outcomes are redacted with the store's patterns before they leave
the process (``WorkQueue(redact=…)``).
"""

from __future__ import annotations

import asyncio
import secrets
import typing as t

from politerm.engine.turnwork import ANSWER_KIND, TURN_KIND, TurnReply, answer_stream
from politerm.errors import FleetError, ResultTimeout, StaleAction, WorkInvalid
from politerm.fleet.connect import connect_config
from politerm.fleet.queue import WorkQueue
from politerm.fleet.work import Work, WorkKind, WorkState

if t.TYPE_CHECKING:
    from politerm.config import Config
    from politerm.engine.turnwork import TurnWork
    from politerm.store import RunStore

#: Longest one wait for a reply blocks a thread (the router's loop looks again after it).
REPLY_WAIT = 2.0
#: Longest ``poli approve`` waits for the node of a remote agent to take its answer.
ANSWER_WAIT = 30.0


def open_queue(config: Config, store: RunStore | None = None) -> WorkQueue:
    """The project's work queue in the fleet's Redis (no command is sent yet).

    Raises
    ------
    FleetRefused
        ``[fleet] url`` is not one politerm connects to (unauthenticated and not loopback…).
    """
    assert config.fleet is not None
    conn = connect_config(config.fleet)
    redact = None if store is None else store.redact
    return WorkQueue.from_config(conn, config.fleet, config.project.root, redact=redact)


class FleetPost:
    """A router's :class:`~politerm.engine.remote.TurnPost` over the fleet's queue."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue

    def post(self, work: TurnWork) -> None:
        """Submit the turn (an id already known changes nothing)."""
        self.queue.submit(Work(work.work_id, work.agent, WorkKind(TURN_KIND), work.payload()))

    def reply(self, work: TurnWork) -> TurnReply | None:
        """The node's reply, a dead letter as a turn not delivered, or None (not yet)."""
        try:
            result = self.queue.wait_result(work.work_id, 0)
        except ResultTimeout:
            return None
        except WorkInvalid:
            return None  # not known (expired after [fleet] keep): the caller posts it again
        if result.state is WorkState.DEAD:
            why = str(result.outcome.get("error") or "no node could run it")
            return TurnReply(False, "blocked", error=f"dead-lettered by the fleet: {why}")
        return TurnReply.from_payload(result.outcome)

    async def wait(self, work: TurnWork, timeout: float) -> None:
        """Sleep until ``work`` may have a reply (at most ``timeout``, and ``REPLY_WAIT``)."""
        bound = min(timeout, REPLY_WAIT)
        try:
            await asyncio.to_thread(self.queue.wait_result, work.work_id, bound)
        except (ResultTimeout, WorkInvalid):
            return


def answer_remote(
    queue: WorkQueue,
    agent: str,
    decision: str,
    *,
    by: str,
    asked: float | None = None,
    command: str | None = None,
) -> str:
    """Give an approval to ``agent`` on its node (work of kind answer); what the node said.

    ``asked`` and ``command`` name the question a view showed: the node answers it only if
    it is still the open one (as :func:`politerm.ui.actions.approve` does on one machine).

    Raises
    ------
    StaleAction
        The question named is not the open one any more (the node said so).
    FleetError
        The node did not take it within :data:`ANSWER_WAIT`, or said why it could not (no
        question waiting there).
    """
    work_id = f"answer-{agent}-{secrets.token_hex(4)}"
    payload: dict[str, t.Any] = {"decision": decision, "by": by}
    if asked is not None:
        payload |= {"asked": asked, "command": command or ""}
    queue.submit(Work(work_id, answer_stream(agent), WorkKind(ANSWER_KIND), payload))
    result = queue.wait_result(work_id, ANSWER_WAIT)
    said = result.outcome
    if said.get("stale"):
        msg = f"{agent} (node {said.get('node') or result.node}): {said['error']}"
        raise StaleAction(msg)
    if result.state is WorkState.DEAD or "error" in said:
        where = f"node {said.get('node') or result.node or '?'}"
        msg = f"{agent} ({where}): {said.get('error') or 'no node took the answer'}"
        raise FleetError(msg)
    return f"{said.get('answered', 'answered')} (on node {said.get('node') or result.node})"
