"""The fleet's work queue: Redis Streams with one consumer group, leases fenced by epochs.

Each agent has a work stream (``poli:{PROJECT}:work:AGENT``) read by the nodes that host it,
each as the consumer of its own name in the group ``nodes``. A piece of work lives in its
record (a hash named by its id); the stream entry only carries the id. What happens to it:

1. :meth:`WorkQueue.submit` writes the record and the entry, once per id (idempotent);
   its payload is redacted before it leaves this process.
2. :meth:`WorkQueue.claim` hands a node an entry (XREADGROUP), or an entry whose attempt is
   no longer live (the lease expired: its node died, hung or was cut off), and starts a
   *new attempt*: attempt + 1, a new epoch from one counter (INCR), an expiry.
3. The node renews its lease (:meth:`~WorkQueue.renew`) while it works and calls
   :meth:`~WorkQueue.check` right before it types: it types only while its epoch is the
   newest and the lease has more than the margin left.
4. :meth:`WorkQueue.complete` is accepted only from the newest epoch: the outcome is stored,
   appended to the results stream and the entry acknowledged (XACK), in one script. A late
   outcome of a fenced attempt is rejected and appended to the ``late`` stream instead.
5. After ``max_attempts`` attempts, a claim turns the work into a dead letter (the ``dead``
   stream, and a DEAD result for whoever waits on it).

Two attempts are never live at once: an attempt starts only when the previous one's lease
has expired by Redis's clock, and a node's own view of its lease (:meth:`Lease.remaining`)
ends no later than that. The library never imports the driver; a node (``poli node``)
drives the agents and calls these.
"""

from __future__ import annotations

import math
import time
import typing as t

from politerm.errors import Fenced, LeaseExpiring, ResultTimeout, WorkInvalid
from politerm.fleet import _scripts
from politerm.fleet.keys import GROUP, Keys, check_name
from politerm.fleet.ledger import Ledger, as_int, as_outcome
from politerm.fleet.work import (
    Lease,
    Result,
    Work,
    WorkKind,
    WorkRecord,
    WorkState,
    to_json,
)
from politerm.redact import Redactor, map_strings

if t.TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    from politerm.config.fleet import FleetConfig
    from politerm.fleet.connect import Connection

__all__ = ["WorkQueue"]

# A given-back entry is made this idle (ms): older than any lease, so the next claim takes it.
_GIVEN_BACK_IDLE = 10**10
# The longest one blocking read may take, as a share of the command timeout.
_BLOCK_SHARE = 0.5
# A blocking read that waits for a lease to run out wakes this much after (Redis's clock
# is in ms; a read woken early would find the lease still live).
_EXPIRY_SLACK_MS = 2


def _default_redact() -> Callable[[str], str]:
    redactor = Redactor()
    return lambda text: redactor.tagged(text)[0]


class WorkQueue:
    """A project's work queue in the fleet's Redis.

    Parameters
    ----------
    conn
        The connection (:func:`politerm.fleet.connect.connect`).
    project
        The fleet's name of the project: every key starts with ``poli:{PROJECT}:``.
    redact
        Applied to every string of a payload and an outcome before it is sent; the store's
        ``RunStore.redact`` on a node (its vault keeps the originals there). Default: the
        built-in patterns.
    lease
        Seconds a claim or a renewal lasts.
    margin
        Seconds of lease an attempt needs left to type (:meth:`check`).
    max_attempts
        Attempts before a piece of work becomes a dead letter.
    keep
        Seconds a finished record is kept (and its id deduplicated).
    maxlen
        About how many entries the results, late and dead streams keep.
    """

    def __init__(
        self,
        conn: Connection,
        project: str,
        *,
        redact: Callable[[str], str] | None = None,
        lease: float = 30.0,
        margin: float = 5.0,
        max_attempts: int = 3,
        keep: float = 7 * 86400.0,
        maxlen: int = 10_000,
    ) -> None:
        if not 0 <= margin < lease:
            msg = f"the margin ({margin:g} s) must be less than the lease ({lease:g} s)"
            raise WorkInvalid(msg)
        self.conn = conn
        self.keys = Keys(project)
        self.ledger = Ledger(conn, self.keys)
        """Its late results, dead letters and paused work."""
        self.redact = redact or _default_redact()
        self.lease = lease
        self.margin = margin
        self.max_attempts = max_attempts
        self.keep = keep
        self.maxlen = maxlen
        client = conn.client
        self._submit = client.register_script(_scripts.SUBMIT)
        self._claim = client.register_script(_scripts.CLAIM)
        self._renew = client.register_script(_scripts.RENEW)
        self._complete = client.register_script(_scripts.COMPLETE)
        self._give_back = client.register_script(_scripts.GIVE_BACK)
        self._park = client.register_script(_scripts.PARK)
        # From the last claim that found nothing: ms until the project's next lease runs
        # out (-1: none is held).
        self._next_expiry = -1
        self._turn = 0
        # Entries XREADGROUP handed a node beyond the one started (one per stream per
        # read), by node: (agent, entry, work id). Lost with the process, they are
        # re-claimed after a lease like any entry whose node never started it.
        self._backlog: dict[str, list[tuple[str, str, str]]] = {}

    @classmethod
    def from_config(
        cls,
        conn: Connection,
        config: FleetConfig,
        project_root: Path,
        *,
        redact: Callable[[str], str] | None = None,
    ) -> WorkQueue:
        """A queue with ``[fleet]``'s lease, margin, attempts and keep."""
        return cls(
            conn,
            config.project_name(project_root),
            redact=redact,
            lease=config.lease,
            margin=config.margin,
            max_attempts=config.max_attempts,
            keep=config.keep,
        )

    def block_ms(self, seconds: float) -> int:
        """One slice of a blocking read that wants ``seconds``: in ms, at least 1.

        A read blocks in slices of at most half the command timeout, so that no read
        outlasts the timeout (the connection would call Redis unreachable).

        Examples
        --------
        >>> from politerm.fleet.connect import connect
        >>> q = WorkQueue(connect("redis://localhost", timeout=5.0), "shop")
        >>> q.block_ms(60), q.block_ms(0.2), q.block_ms(0)
        (2500, 200, 1)
        """
        return max(1, int(min(seconds, self.conn.timeout * _BLOCK_SHARE) * 1000))

    def results_end(self) -> str:
        """The id of the results stream's newest entry ("0-0": none): a reader's start.

        A waiter takes it *before* it reads a record: a result that lands between the two
        is then still read from the stream.
        """
        with self.conn.talking("reading the end of the results stream"):
            last = self.conn.cmd.xrevrange(self.keys.results, count=1)
        return str(last[0][0]) if last else "0-0"

    def read_results(self, cursor: str, seconds: float) -> tuple[str, list[dict[str, str]]]:
        """The results appended after ``cursor``, waiting up to one slice of ``seconds``.

        Returns the new cursor and each entry's fields (``id``, ``agent``, ``state``…):
        one blocking XREAD, however many works its reader waits for.
        """
        with self.conn.talking("reading the results stream"):
            got = self.conn.cmd.xread(
                {self.keys.results: cursor}, count=100, block=self.block_ms(seconds)
            )
        fields = []
        for _stream, entries in got or []:
            for entry, f in entries:
                cursor = entry
                fields.append(f)
        return cursor, fields

    def standing(self, work_id: str) -> tuple[WorkRecord, Result | None]:
        """Where ``work_id`` stands and, once it ended, its result (one round trip).

        Raises
        ------
        WorkInvalid
            No such work (never submitted, or expired after ``keep``).
        """
        with self.conn.talking(f"reading work {work_id}"):
            raw = self._record_of(work_id)
        return _record(raw), _result(work_id, raw)

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self.lease * 1000))

    # --- submitting ---------------------------------------------------------------------

    def submit(self, work: Work, router: int | None = None) -> bool:
        """Queue ``work`` unless its id is already known; True when it was new.

        ``router``: the router role's token (:mod:`politerm.fleet.routers`) of the router
        that posts it; the script refuses the work unless that token holds the role now.

        Raises
        ------
        WorkInvalid
            The payload is not JSON, or the id is known for another agent.
        Fenced
            ``router`` does not hold the router role (any more): nothing was queued.
        """
        payload = to_json(map_strings(dict(work.payload), self.redact), f"work {work.id}")
        if self.redact(work.id) != work.id:
            msg = f"work id {work.id!r} looks like a secret: choose another id"
            raise WorkInvalid(msg)
        with self.conn.talking(f"submitting work {work.id} for {work.agent}"):
            reply = self._submit(
                keys=[
                    self.keys.work(work.id),
                    self.keys.stream(work.agent),
                    self.keys.agents,
                    self.keys.router,
                ],
                args=[
                    GROUP,
                    work.id,
                    work.agent,
                    work.kind.value,
                    payload,
                    "" if router is None else str(router),
                ],
            )
        if reply[0] == "fenced":
            _, holder, token = reply
            now = f"router {holder} holds it (token {token})" if holder else "nobody holds it"
            msg = f"work {work.id} not posted: router token {router} is fenced: {now}"
            raise Fenced(msg)
        if reply[0] == "exists" and reply[2] != work.agent:
            msg = f"work {work.id} was already submitted for {reply[2]}, not {work.agent}"
            raise WorkInvalid(msg)
        return bool(reply[0] == "new")

    # --- claiming -----------------------------------------------------------------------

    def _start(self, node: str, agents: Sequence[str], args: list[t.Any]) -> Lease | None:
        sent = time.monotonic()
        reply = self._claim(
            keys=[
                self.keys.epochs,
                self.keys.leased,
                self.keys.results,
                self.keys.dead,
                *(self.keys.stream(a) for a in agents),
            ],
            args=[
                GROUP,
                node,
                self._lease_ms,
                self.max_attempts,
                round(self.keep * 1000),
                self.maxlen,
                self.keys.prefix,
                *args,
            ],
        )
        if not reply or reply[0] == "none":
            self._next_expiry = int(reply[1]) if reply else -1
            return None
        _, work_id, entry, epoch, expires, attempt, kind, payload, agent = reply
        work = Work(
            id=work_id,
            agent=agent,
            kind=WorkKind(kind),
            payload=as_outcome(payload),
            attempt=int(attempt),
        )
        return Lease(
            work=work,
            node=node,
            epoch=int(epoch),
            expires_at=int(expires) / 1000,
            entry=entry,
            deadline=sent + self.lease,
        )

    def claim(self, node: str, agents: Iterable[str], block_ms: int = 0) -> Lease | None:
        """Start a new attempt at one piece of work for one of ``agents``; None if none came.

        Work whose lease expired (its node died or was cut off) comes first, then new work.
        ``block_ms`` bounds how long to wait for new work (0: do not wait).

        Parameters
        ----------
        node
            This node's name (its consumer in the group).
        agents
            The agents this node hosts: it never gets work for any other.
        block_ms
            The longest wait for new work, in milliseconds.
        """
        check_name("node", node)
        names = [check_name("agent", a) for a in dict.fromkeys(agents)]
        if not names:
            return None
        what = f"claiming work for {', '.join(names)} as node {node}"
        # Each claim starts the script's scan at the next agent: one agent's steady stream
        # of work never starves the others of a node.
        self._turn = (self._turn + 1) % len(names)
        names = names[self._turn :] + names[: self._turn]
        deadline = time.monotonic() + block_ms / 1000
        with self.conn.talking(what):
            lease = self._from_backlog(node) or self._start(node, names, ["any"])
            while lease is None:
                left_ms = math.ceil((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                # Each slice ends when the project's next lease runs out: its work is
                # re-claimed at once.
                block = self.block_ms(left_ms / 1000)
                if self._next_expiry >= 0:
                    block = max(1, min(block, self._next_expiry + _EXPIRY_SLACK_MS))
                got = self.conn.cmd.xreadgroup(
                    GROUP, node, {self.keys.stream(a): ">" for a in names}, count=1, block=block
                )
                backlog = self._backlog.setdefault(node, [])
                for stream, entries in got or []:
                    agent = stream[len(self.keys.stream("")) :]
                    backlog.extend((agent, entry, f.get("id", "")) for entry, f in entries)
                lease = self._from_backlog(node)
                if lease is None and not got and time.monotonic() < deadline:
                    # The slice ended early, at the project's next lease expiry: look
                    # again now. (Past the deadline the caller's next claim looks first.)
                    lease = self._start(node, names, ["any"])
            return lease

    def _from_backlog(self, node: str) -> Lease | None:
        backlog = self._backlog.get(node, [])
        while backlog:
            agent, entry, work_id = backlog.pop(0)
            lease = self._start(node, [agent], ["new", entry, work_id])
            if lease is not None:
                return lease
        return None

    # --- holding a lease ----------------------------------------------------------------

    def renew(self, lease: Lease) -> Lease:
        """Extend ``lease`` by a full lease from now; the renewed lease.

        Raises
        ------
        Fenced
            Another attempt holds a newer epoch, or the work ended or was given back.
        """
        sent = time.monotonic()
        with self.conn.talking(f"renewing the lease on {lease}"):
            reply = self._renew(
                keys=[
                    self.keys.stream(lease.work.agent),
                    self.keys.work(lease.work.id),
                    self.keys.leased,
                ],
                args=[GROUP, lease.node, lease.entry, lease.epoch, self._lease_ms, lease.work.id],
            )
        if reply[0] != "ok":
            raise self._fenced(lease, reply)
        return Lease(
            work=lease.work,
            node=lease.node,
            epoch=lease.epoch,
            expires_at=int(reply[1]) / 1000,
            entry=lease.entry,
            deadline=sent + self.lease,
        )

    def check(self, lease: Lease, margin: float | None = None) -> Lease:
        """Renew ``lease``, making sure it has more than ``margin`` seconds left.

        Call it right before typing anything for its work (a prompt, a key, an answer).
        Returns the renewed lease; type only when this returns, and only for about
        ``lease.remaining() - margin`` seconds.

        Raises
        ------
        Fenced
            Another attempt holds a newer epoch: type nothing, report nothing.
        LeaseExpiring
            The lease is current but the renewal left less than ``margin`` (a slow Redis):
            do not type now.
        FleetUnavailable
            Redis did not answer: the attempt cannot prove it is live, so it must not type.
        """
        margin = self.margin if margin is None else margin
        renewed = self.renew(lease)
        left = renewed.remaining()
        if left <= margin:
            msg = f"{renewed}: {left:.1f} s of lease left, less than the {margin:g} s margin"
            raise LeaseExpiring(msg)
        return renewed

    def complete(self, lease: Lease, outcome: Mapping[str, t.Any]) -> None:
        """Report the attempt's outcome; accepted only while its epoch is the newest.

        Accepted: the outcome (redacted) is stored and appended to the results stream and
        the entry is acknowledged, in one script (calling it again changes nothing).

        Raises
        ------
        Fenced
            The attempt had been fenced: the outcome was rejected and recorded as a late
            result (:meth:`late_results`).
        """
        text = to_json(map_strings(dict(outcome), self.redact), f"the outcome of {lease}")
        with self.conn.talking(f"completing {lease}"):
            reply = self._complete(
                keys=[
                    self.keys.stream(lease.work.agent),
                    self.keys.work(lease.work.id),
                    self.keys.leased,
                    self.keys.results,
                    self.keys.late,
                ],
                args=[
                    GROUP,
                    lease.node,
                    lease.entry,
                    lease.epoch,
                    text,
                    round(self.keep * 1000),
                    self.maxlen,
                    lease.work.id,
                    lease.work.agent,
                    lease.work.attempt,
                ],
            )
        if reply[0] != "accepted":
            raise self._fenced(lease, reply, late=True)

    def give_back(self, lease: Lease, error: str) -> None:
        """End this attempt without an outcome; the next claim starts a new attempt.

        For an attempt that could not run (the agent would not start, the node is
        stopping). ``error`` (redacted) is kept, and named by the dead letter if the work
        runs out of attempts.

        Raises
        ------
        Fenced
            The attempt had already been fenced.
        """
        self._end_attempt(self._give_back, lease, "giving back", error)

    def park(self, lease: Lease, reason: str) -> None:
        """Pause this attempt's work: a budget cap stopped it before anything was typed.

        The attempt is undone (it does not count toward ``max_attempts``), the work waits
        queued, listed by :meth:`paused` with ``reason`` (redacted), and the next claim of
        a node hosting its agent starts it again. Its waiters are woken (they find it
        paused).

        Raises
        ------
        Fenced
            The attempt had already been fenced.
        """
        keys = [self.keys.paused, self.keys.results]
        args = [self.maxlen, lease.work.agent]
        self._end_attempt(self._park, lease, "pausing", reason, keys, args)

    def _end_attempt(
        self,
        script: t.Any,
        lease: Lease,
        what: str,
        why: str,
        keys: Sequence[str] = (),
        args: Sequence[t.Any] = (),
    ) -> None:
        """End ``lease``'s attempt with ``script`` (give back, park), ``why`` redacted."""
        with self.conn.talking(f"{what} {lease}"):
            reply = script(
                keys=[
                    self.keys.stream(lease.work.agent),
                    self.keys.work(lease.work.id),
                    self.keys.leased,
                    *keys,
                ],
                args=[
                    GROUP,
                    lease.node,
                    lease.entry,
                    lease.epoch,
                    self.redact(why),
                    lease.work.id,
                    _GIVEN_BACK_IDLE,
                    *args,
                ],
            )
        if reply[0] != "ok":
            raise self._fenced(lease, reply)

    @staticmethod
    def _fenced(lease: Lease, reply: Sequence[t.Any], *, late: bool = False) -> Fenced:
        _, state, epoch, holder = reply
        now = f"the work is {state}"
        if state == "leased":
            now += f" by node {holder} (epoch {epoch})"
        elif state == "gone":
            now = "the work is no longer known"
        tail = "; its outcome was rejected and recorded as late" if late else ""
        return Fenced(f"{lease} is fenced: {now}{tail}")

    # --- reading ------------------------------------------------------------------------

    def get(self, work_id: str) -> WorkRecord | None:
        """The record of ``work_id``, or None when it is unknown (or expired after ``keep``)."""
        with self.conn.talking(f"reading work {work_id}"):
            raw = self.conn.cmd.hgetall(self.keys.work(work_id))
        return _record(raw) if raw else None

    def leases(self) -> list[WorkRecord]:
        """The work under a lease now (live or expired, not yet reclaimed), soonest first."""
        with self.conn.talking("listing leases"):
            ids = self.conn.cmd.zrange(self.keys.leased, 0, -1)
            pipe = self.conn.cmd.pipeline(transaction=False)
            for work_id in ids:
                pipe.hgetall(self.keys.work(work_id))
            raws = pipe.execute()
        return [_record(raw) for raw in raws if raw]

    def _record_of(self, work_id: str) -> dict[str, str]:
        raw: dict[str, str] = self.conn.cmd.hgetall(self.keys.work(work_id))
        if not raw:
            msg = f"no work {work_id!r} in the fleet queue of {self.keys.project}"
            raise WorkInvalid(msg)
        return raw

    def result(self, work_id: str) -> Result | None:
        """The result of ``work_id`` if it ended (done or dead), else None (no waiting).

        One round trip.

        Raises
        ------
        WorkInvalid
            No such work (never submitted, or expired after ``keep``).
        """
        with self.conn.talking(f"reading the result of work {work_id}"):
            return _result(work_id, self._record_of(work_id))

    def wait_result(self, work_id: str, timeout: float) -> Result:
        """Wait (at most ``timeout`` s) until ``work_id`` is done or dead; its result.

        With ``timeout`` 0 it only looks (one round trip, as :meth:`result`).

        Raises
        ------
        ResultTimeout
            Naming the work and where it stood when the wait ran out.
        WorkInvalid
            No such work.
        """
        deadline = time.monotonic() + timeout
        cursor = self.results_end() if timeout > 0 else "0-0"
        while True:
            with self.conn.talking(f"waiting for the result of work {work_id}"):
                raw = self._record_of(work_id)
            result = _result(work_id, raw)
            if result is not None:
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                break
            cursor, _ = self.read_results(cursor, left)
        msg = f"work {work_id} had no result within {timeout:g} s (it is {_where(_record(raw))})"
        raise ResultTimeout(msg)


def _result(work_id: str, raw: Mapping[str, str]) -> Result | None:
    state = WorkState(raw.get("state", "queued"))
    if not state.ended:
        return None
    outcome = as_outcome(raw.get("outcome"))
    if state is WorkState.DEAD:
        outcome = {"error": raw.get("error", "")}
    return Result(
        work_id=work_id,
        agent=raw.get("agent", ""),
        state=state,
        outcome=outcome,
        epoch=as_int(raw.get("result_epoch") or raw.get("epoch")),
        node=raw.get("node", ""),
        attempt=as_int(raw.get("attempt")),
    )


def _record(raw: Mapping[str, str]) -> WorkRecord:
    return WorkRecord(
        id=raw.get("id", ""),
        agent=raw.get("agent", ""),
        kind=WorkKind(raw.get("kind", "turn")),
        state=WorkState(raw.get("state", "queued")),
        attempt=as_int(raw.get("attempt")),
        epoch=as_int(raw.get("epoch")),
        node=raw.get("node", ""),
        expires_at=as_int(raw.get("expires")) / 1000,
        submitted_at=as_int(raw.get("submitted")) / 1000,
        late=as_int(raw.get("late")),
        error=raw.get("error", ""),
        paused=raw.get("paused", ""),
    )


def _where(record: WorkRecord) -> str:
    if record.state is WorkState.LEASED:
        return f"leased by node {record.node}, attempt {record.attempt}, epoch {record.epoch}"
    return f"{record.state.value}, attempt {record.attempt}"
