"""Answers to a task's question given on any node of a fleet, applied by the router.

A task lives in the store of the router that runs it. ``poli answer`` (or the web page) on
a machine whose store does not hold the task posts the answer as work of kind ``answer`` on
the stream :data:`~politerm.engine.turnwork.TASK_ANSWERS` — the way an approval for an agent
of another node goes on that agent's answer stream (:func:`~politerm.engine.fleetboard.
approve_remote`) — and waits for the taker's word. The router holding the fleet's router
role takes it (:class:`TaskAnswers`) and applies it at once with the same call as a
``poli answer`` on its own machine, only if the task still asks the question named (a view
names the one it showed; the command line names none), and says what it did.

Imported only when ``[fleet]`` is configured (it needs redis-py).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import typing as t

from politerm.engine.fleetlink import post_answer
from politerm.engine.turnwork import TASK_ANSWERS
from politerm.errors import FleetError, LeaseLost, PolitermError, StaleAction
from politerm.fleet.nodes import NodeQueue
from politerm.fleet.routers import router_status

if t.TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from politerm.fleet.queue import WorkQueue
    from politerm.fleet.work import Lease

log = logging.getLogger(__name__)

#: Longest one claim of the router waits for an answer. Idle, each wait costs three round
#: trips (the claim script, one blocking XREADGROUP, the script again): 1.5 a second.
CLAIM_WAIT = 2.0
#: After Redis could not be reached, how long before claiming again.
UNREACHABLE_BACKOFF = 1.0

Apply = t.Callable[[str, str, "str | None", str], str]
"""Applies an answer: (task id, text, the question named or None, by) → what was done.

Raises :class:`~politerm.errors.StaleAction` when the question named is not the open one,
another :class:`~politerm.errors.PolitermError` when the task cannot take it."""


def answer_task_remote(
    queue: WorkQueue,
    task_id: str,
    text: str,
    *,
    by: str,
    lease: float,
    question: str | None = None,
) -> str:
    """Answer task ``task_id`` through the router holding the router role; what it said.

    ``question``: the question a view showed (the router refuses the answer unless the
    task still asks it); None answers whatever the task asks. ``lease``: the role's lease
    (``[fleet] lease``). The text is redacted before it is posted, as every payload.

    Raises
    ------
    StaleAction
        The task waits on no question, or on another one than ``question``.
    FleetError
        No router holds the role, it did not take the answer within
        :data:`~politerm.engine.fleetlink.ANSWER_WAIT`, or it said why it could not (no
        such task there, or it waits for no answer).
    """
    role = router_status(queue, lease)
    if role.holder is None:
        msg = (
            f"task {task_id}: no router holds the fleet's router role, so none can take "
            "the answer (start it on its machine: `poli up`)"
        )
        raise FleetError(msg)
    payload: dict[str, t.Any] = {"task": task_id, "text": text, "by": by}
    if question is not None:
        payload["question"] = question
    work_id = f"answer-task-{secrets.token_hex(6)}"
    return post_answer(queue, work_id, TASK_ANSWERS, payload, f"task {task_id}")


class TaskAnswers:
    """The router's taker of the answers given on other nodes to its tasks' questions.

    Runs while the router holds the router role; each answer is claimed under a lease
    (the queue's own), applied with ``apply`` and completed with what was done, so the
    poster's wait ends with it. An answer claimed once the role is lost is given back: the
    next holder of the role takes it.

    Parameters
    ----------
    queue
        The project's queue.
    node
        This machine's node name (the consumer the router claims as).
    apply
        What a ``poli answer`` on this machine does (:data:`Apply`).
    held
        Whether this router still holds the router role.
    """

    def __init__(self, queue: WorkQueue, node: str, apply: Apply, held: Callable[[], bool]) -> None:
        self.claims = NodeQueue(queue, node)
        self.node, self.apply, self.held = node, apply, held
        self.taken = 0
        """How many answers were claimed and completed."""

    async def run(self) -> None:
        """Claim and apply answers until cancelled (or the role is lost)."""
        while True:
            try:
                lease = await asyncio.to_thread(self.claims.claim, [TASK_ANSWERS], block=CLAIM_WAIT)
            except FleetError as exc:
                log.warning("router on node %s: claiming answers: %s", self.node, exc)
                await asyncio.sleep(UNREACHABLE_BACKOFF)
                continue
            if lease is None:
                continue
            if not self.held():
                why = f"router on node {self.node} lost the router role"
                await asyncio.to_thread(_give_back, self.claims, lease, why)
                return
            said = self.said(lease.work.payload)
            try:
                await asyncio.to_thread(self.claims.queue.complete, lease, said)
            except (LeaseLost, FleetError) as exc:
                # Applied here already; a later claim of the same answer finds it stale.
                log.warning("router on node %s: reporting %s: %s", self.node, lease, exc)
            self.taken += 1

    def said(self, payload: Mapping[str, t.Any]) -> dict[str, t.Any]:
        """Apply one answer; the outcome the poster reads (``answered`` or ``error``)."""
        try:
            task_id, text = str(payload["task"]), str(payload["text"])
            question = payload.get("question")
            done = self.apply(
                task_id,
                text,
                None if question is None else str(question),
                str(payload.get("by") or "another node"),
            )
        except StaleAction as exc:
            return {"error": str(exc), "stale": True, "node": self.node}
        except KeyError as exc:
            return {"error": f"a malformed answer (no {exc})", "node": self.node}
        except PolitermError as exc:
            return {"error": str(exc), "node": self.node}
        return {"answered": done, "node": self.node}


def _give_back(claims: NodeQueue, lease: Lease, why: str) -> None:
    try:
        claims.queue.give_back(lease, why)
    except FleetError as exc:
        # Its lease runs out instead, and the next holder of the role claims it then.
        log.warning("giving back %s: %s", lease, exc)
