"""The names of a project's Redis keys.

Every key of a project starts with ``poli:{PROJECT}:``. The braces are a Redis Cluster hash
tag: all of a project's keys land in one slot, so each Lua script (which touches the work's
record, its stream and the result streams together) stays on one server even in a cluster.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from politerm.config.fleet import NAME_PATTERN
from politerm.errors import WorkInvalid

__all__ = ["GROUP", "Keys", "check_name"]

GROUP: t.Final = "nodes"
"""The consumer group of every work stream: each node reads as the consumer of its name."""

_NAME_RE = re.compile(NAME_PATTERN)


def check_name(what: str, value: str) -> str:
    """``value`` if it is a valid name of a node, agent or project; else :class:`WorkInvalid`.

    Examples
    --------
    >>> check_name("agent", "EXECUTER")
    'EXECUTER'
    >>> check_name("agent", "a b")
    Traceback (most recent call last):
    ...
    politerm.errors.WorkInvalid: agent 'a b': expected letters, digits, '_', '.', '-' (at most 63)
    """
    if not _NAME_RE.match(value):
        msg = f"{what} {value!r}: expected letters, digits, '_', '.', '-' (at most 63)"
        raise WorkInvalid(msg)
    return value


@dataclasses.dataclass(frozen=True)
class Keys:
    """The keys of one project.

    Examples
    --------
    >>> k = Keys("shop")
    >>> k.stream("EXECUTER"), k.work("t1:turn:1")
    ('poli:{shop}:work:EXECUTER', 'poli:{shop}:w:t1:turn:1')
    """

    project: str

    def __post_init__(self) -> None:
        check_name("project", self.project)

    @property
    def prefix(self) -> str:
        """``poli:{PROJECT}:``, the start of every key of the project."""
        return f"poli:{{{self.project}}}:"

    def stream(self, agent: str) -> str:
        """The work stream of ``agent`` (a pool of nodes reads it through :data:`GROUP`)."""
        return f"{self.prefix}work:{agent}"

    def work(self, work_id: str) -> str:
        """The record (a hash) of one piece of work: state, attempt, epoch, payload, outcome."""
        return f"{self.prefix}w:{work_id}"

    @property
    def epochs(self) -> str:
        """The counter every attempt's epoch (fencing token) is drawn from."""
        return f"{self.prefix}epochs"

    @property
    def agents(self) -> str:
        """The set of agents that have a work stream."""
        return f"{self.prefix}agents"

    @property
    def leased(self) -> str:
        """The work under a lease now (a sorted set: id by the lease's expiry, ms)."""
        return f"{self.prefix}leased"

    @property
    def results(self) -> str:
        """The accepted outcomes (and dead letters), in the order they were accepted."""
        return f"{self.prefix}results"

    @property
    def late(self) -> str:
        """The rejected late results: outcomes sent by an attempt that had been fenced."""
        return f"{self.prefix}late"

    @property
    def dead(self) -> str:
        """The dead letters: work that used up its attempts."""
        return f"{self.prefix}dead"

    @property
    def paused(self) -> str:
        """The work a budget cap paused before it was typed (a hash: id to JSON)."""
        return f"{self.prefix}paused"

    @property
    def router(self) -> str:
        """The router role: holder, token, expiry (a hash; see ``fleet/routers.py``)."""
        return f"{self.prefix}router"

    @property
    def router_epochs(self) -> str:
        """The counter the router role's tokens are drawn from."""
        return f"{self.prefix}router:epochs"

    @property
    def router_standby(self) -> str:
        """Routers waiting for the role: holder to Redis's time of its last try (ms)."""
        return f"{self.prefix}router:standby"

    @property
    def nodes(self) -> str:
        """The set of nodes that ever sent a heartbeat."""
        return f"{self.prefix}nodes"

    def node(self, name: str) -> str:
        """A node's last heartbeat (a hash: time, agents, load)."""
        return f"{self.prefix}node:{name}"

    @property
    def board(self) -> str:
        """The agents' board (a hash): ``NODE/AGENT`` → the agent's last published row."""
        return f"{self.prefix}board"

    @property
    def board_log(self) -> str:
        """The board's changes (a capped stream): which rows changed, for watchers to wake."""
        return f"{self.prefix}board:log"

    @property
    def board_asks(self) -> str:
        """The tasks waiting for an answer (a hash): ``NODE/TASK`` → the question asked."""
        return f"{self.prefix}board:asks"

    def board_beat(self, publisher: str) -> str:
        """A board publisher's beat (``NODE:ROLE``): set with an expiry at each publish."""
        return f"{self.prefix}board:beat:{publisher}"

    def budget(self, day: str, scope: str) -> str:
        """One day's spending of ``scope`` (``project`` or ``agent:NAME``), a hash."""
        return f"{self.prefix}budget:{day}:{scope}"

    @property
    def budget_caps(self) -> str:
        """Caps raised (or lowered) at run time, fleet-wide; they win over the config's."""
        return f"{self.prefix}budget:caps"
