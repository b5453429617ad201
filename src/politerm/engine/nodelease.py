"""The leases a node types its work under: held, renewed, written on the journal, reported.

Each piece of work a node (:mod:`politerm.engine.node`) runs is one attempt of its claim's
lease. While the attempt types (:meth:`Attempts.leased`), the lease is renewed in the
background and, right before each paste and each submit key (:meth:`Attempts.check`, on the
driver's ``before-paste`` and ``before-submit`` points), checked with the queue and written
on the prompt's row in the journal of turns: a lease lost or fenced raises there, and
nothing is submitted. Its outcome is reported after the journal has it
(:meth:`Attempts.complete`); one the queue rejects as late is recorded on its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import typing as t

from politerm.driver.leftover import abandon
from politerm.errors import FleetError, LeaseLost
from politerm.store.journal import JournalState, Serves, Workflow

if t.TYPE_CHECKING:
    from collections.abc import Mapping

    from politerm.fleet.queue import WorkQueue
    from politerm.fleet.work import Lease
    from politerm.store import RunStore
    from politerm.store.journal import JournalRow

log = logging.getLogger(__name__)

#: The journal's record kind of a prompt typed for fleet work (its key: the work id).
WORK_RECORD: t.Final = "fleet-work"
#: How long a node tries to report a turn's outcome while Redis does not answer.
REPORT_FOR = 120.0
#: After Redis could not be reached, how long before trying again.
UNREACHABLE_BACKOFF = 1.0


@dataclasses.dataclass
class Attempt:
    """The lease a piece of work is typed under, renewed as the turn goes on."""

    lease: Lease
    serves: Serves
    lost: str | None = None


class Attempts:
    """A node's attempts under way, one per agent at most (see the module doc).

    Parameters
    ----------
    store
        This machine's run store (the journal of turns, its events).
    queue
        The fleet's queue.
    node
        The node's name (written on each row with the lease).
    lease_seconds
        How long a lease lasts: it is renewed every third of that.
    """

    def __init__(self, store: RunStore, queue: WorkQueue, node: str, lease_seconds: float) -> None:
        self.store, self.queue, self.node = store, queue, node
        self.lease_seconds = lease_seconds
        self.by_agent: dict[str, Attempt] = {}

    @contextlib.asynccontextmanager
    async def leased(self, agent: str, lease: Lease) -> t.AsyncIterator[Attempt]:
        """The attempt of ``lease`` while its body types: renewed, written before each paste.

        A lease lost or fenced right before a paste or its submit key raises there (nothing
        was submitted): the attempt's rows are abandoned and the body's result stays unset.
        """
        serves = Serves(Workflow.FLEET, WORK_RECORD, (lease.work.id,))
        attempt = self.by_agent[agent] = Attempt(lease, serves)
        # A new attempt (a higher epoch) gets a row of its own: a row this node left open for
        # an older attempt of the same work (killed mid-turn) is superseded, not taken over
        # (the journal takes over an open row with the same nonce, which every attempt shares).
        for row in self._open_rows(agent, serves):
            if row.epoch != lease.epoch:
                abandon(self.store, row, f"superseded by epoch {lease.epoch}")
        renewer = asyncio.create_task(self._renew(attempt), name=f"renew-{agent}")
        try:
            yield attempt
        except (LeaseLost, FleetError) as exc:
            self._abandon(agent, serves, f"fenced: {exc}")
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            self.by_agent.pop(agent, None)

    async def check(self, agent: str) -> None:
        """Right before a paste: the lease renewed and written on the prompt's row, or raise."""
        attempt = self.by_agent.get(agent)
        if attempt is None:
            return  # a paste that is no fleet work's (a primer)
        if attempt.lost is not None:
            raise LeaseLost(attempt.lost)
        # Redis unreachable, the lease fenced or nearly out: nothing is typed (raises).
        attempt.lease = await asyncio.to_thread(self.queue.check, attempt.lease)
        lease = attempt.lease
        row = self._write_lease(agent, attempt)
        if row is not None and row.epoch != lease.epoch:
            why = f"{lease}: the journal holds epoch {row.epoch}"
            raise LeaseLost(why)

    def _write_lease(self, agent: str, attempt: Attempt) -> JournalRow | None:
        """The attempt's lease on its open journal row (None: no row open yet)."""
        lease = attempt.lease
        mine = self._open_rows(agent, attempt.serves)
        if not mine:
            return None
        return self.store.journal_lease(
            mine[-1].id,
            work=lease.work.id,
            node=self.node,
            epoch=lease.epoch,
            until=lease.expires_at,
        )

    async def _renew(self, attempt: Attempt) -> None:
        """Keep the lease while the turn runs; note it lost (nothing more is typed then)."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                attempt.lease = await asyncio.to_thread(self.queue.renew, attempt.lease)
                # The row keeps the lease's latest expiry: no other attempt starts before it.
                self._write_lease(attempt.lease.work.agent, attempt)
            except LeaseLost as exc:
                attempt.lost = str(exc)
                self.store.add_event("fenced", agent=attempt.lease.work.agent, detail=str(exc))
                return
            except FleetError as exc:
                log.warning("node %s: renewing %s: %s", self.node, attempt.lease, exc)

    async def complete(self, lease: Lease, outcome: Mapping[str, t.Any]) -> None:
        """Report the outcome (after the journal has it); a late one is recorded as rejected."""
        rows = [r for r in self.store.journal_of_work(lease.work.id) if r.epoch == lease.epoch]
        try:
            await self._report(lease, outcome)
        except LeaseLost as exc:
            why = f"rejected: {exc}"
            for row in rows:
                self.store.journal_verdict(row.id, why)
            self.store.add_event(
                "late-result", agent=lease.work.agent, detail=f"{lease}: result {why}"
            )
            return
        for row in rows:
            self.store.journal_verdict(row.id, "accepted")

    async def _report(self, lease: Lease, outcome: Mapping[str, t.Any]) -> None:
        """``complete``, tried again while Redis does not answer (a restart, a short cut).

        Completing twice changes nothing (the queue's script). Past :data:`REPORT_FOR` the
        node gives up: the lease has run out by then, the work is claimed again, and this
        outcome would be rejected as late anyway.
        """
        give_up = asyncio.get_running_loop().time() + REPORT_FOR
        while True:
            try:
                await asyncio.to_thread(self.queue.complete, lease, outcome)
            except LeaseLost:
                raise
            except FleetError as exc:
                if asyncio.get_running_loop().time() >= give_up:
                    log.warning("node %s: %s: result not reported: %s", self.node, lease, exc)
                    self.store.add_event("unreported", agent=lease.work.agent, detail=str(exc))
                    return
                log.warning("node %s: reporting %s: %s; trying again", self.node, lease, exc)
                await asyncio.sleep(UNREACHABLE_BACKOFF)
            else:
                return

    def _open_rows(self, agent: str, serves: Serves) -> list[JournalRow]:
        """The agent's open journal rows for the work ``serves`` names, oldest first."""
        rows = self.store.journal_open(agent=agent, record=WORK_RECORD)
        return [r for r in rows if r.serves == serves]

    def _abandon(self, agent: str, serves: Serves, why: str) -> None:
        for row in self._open_rows(agent, serves):
            self.store.journal_move(row.id, JournalState.ABANDONED, outcome="fenced")
            self.store.journal_verdict(row.id, why)
        self.store.add_event("fenced", agent=agent, detail=why)
