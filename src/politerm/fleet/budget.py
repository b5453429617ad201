"""The fleet-wide budget breaker: token and cost caps per day, for the project and each agent.

The local ``[budget]`` (:mod:`politerm.driver.tokens`) caps what one machine's store counts
(a turn, a task, a run). A fleet's agents spend on several machines at once, so its caps
are counted where every node sees the same numbers: Redis, one hash per day and scope
(``budget:DAY:project``, ``budget:DAY:agent:NAME``; DAY is Redis's day number, UTC), expired
two days after. Tokens are :class:`~politerm.protocol.usage.Usage` as the transcripts give
them (input + output count); cost is whatever the nodes report (USD for the model APIs),
kept in millionths.

A node asks :meth:`FleetBudget.admit` before it starts a turn: one script reads the day's
spending and the caps and, if no cap is reached, counts the turn. After a turn (or as it
goes) it reports what it spent with :meth:`FleetBudget.charge`. When a cap is reached, new
turns stop with a reason that names the scope, the spending and the key; they resume the
next day, when the cap is raised (:meth:`FleetBudget.set_cap`, fleet-wide, winning over the
configuration of every node) or after an explicit :meth:`FleetBudget.reset`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import typing as t

from politerm.config.fleet import FleetBudgetConfig
from politerm.errors import WorkInvalid
from politerm.fleet.keys import check_name
from politerm.protocol.usage import Usage

if t.TYPE_CHECKING:
    from collections.abc import Sequence

    from politerm.fleet.queue import WorkQueue

__all__ = [
    "CAP_NAMES",
    "HELD_PREFIX",
    "Caps",
    "FleetBudget",
    "Spending",
    "Verdict",
    "day_of",
    "spending_words",
]

MICROS: t.Final = 1_000_000
KEEP_DAYS: t.Final = 2
"""Days a day's counters are kept after it ends (for ``poli fleet status``)."""

CAP_NAMES: t.Final = tuple(FleetBudgetConfig.model_fields)
"""The caps, as ``[fleet.budget]`` names them."""

_BUDGET = """
local t = redis.call('TIME')
local day = math.floor(tonumber(t[1]) / 86400)
-- KEYS: caps hash; ARGV: prefix, mode (admit, charge, peek), agent, input, output, cost
-- (millionths), the four configured caps ('' = none; cost caps in millionths), keep ms
local prefix, mode, agent = ARGV[1], ARGV[2], ARGV[3]
local pkey = prefix .. 'budget:' .. day .. ':project'
local akey = prefix .. 'budget:' .. day .. ':agent:' .. agent
local caps = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do caps[flat[i]] = flat[i + 1] end
local function cap(name, configured)
  local v = caps['agent:' .. agent .. ':' .. name]
  if v == nil then v = caps[name] end
  if v == nil then v = configured end
  if v == '' or v == 'none' then return nil end
  return tonumber(v)
end
-- An admit may carry what the agent spent since last charged: charged first, so it counts.
local charged = false
if mode == 'charge' or mode == 'admit' then
  for _, key in ipairs({pkey, akey}) do
    for i, name in ipairs({'input', 'output', 'cost'}) do
      if tonumber(ARGV[3 + i]) ~= 0 then
        redis.call('HINCRBY', key, name, ARGV[3 + i])
        charged = true
      end
    end
    if charged then redis.call('PEXPIRE', key, tonumber(ARGV[11])) end
  end
end
local function used(key, field)
  if field == 'tokens' then
    local v = redis.call('HMGET', key, 'input', 'output')
    return (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
  end
  return tonumber(redis.call('HGET', key, 'cost')) or 0
end
local checks = {
  {'project', pkey, 'tokens', cap('tokens_per_day', ARGV[7])},
  {'project', pkey, 'cost', cap('cost_per_day', ARGV[8])},
  {'agent', akey, 'tokens', cap('agent_tokens_per_day', ARGV[9])},
  {'agent', akey, 'cost', cap('agent_cost_per_day', ARGV[10])},
}
for _, c in ipairs(checks) do
  if c[4] ~= nil then
    local u = used(c[2], c[3])
    if u >= c[4] then return {'over', day, c[1], c[3], u, c[4]} end
  end
end
if mode == 'admit' then
  for _, key in ipairs({pkey, akey}) do
    redis.call('HINCRBY', key, 'turns', 1)
    if not charged then redis.call('PEXPIRE', key, tonumber(ARGV[11])) end
  end
end
return {'ok', day}
"""

_HELD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- KEYS: paused hash; ARGV: label, agent, node, reason
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({agent = ARGV[2], node = ARGV[3],
  reason = ARGV[4], at = now}))
"""

HELD_PREFIX: t.Final = "router-turn-"
"""How the paused list names a turn a router's breaker holds back (no work on the queue)."""

_TODAY = """
local t = redis.call('TIME')
return math.floor(tonumber(t[1]) / 86400)
"""


def day_of(number: int) -> str:
    """The UTC date of Redis's day ``number`` (days since 1970-01-01).

    Examples
    --------
    >>> day_of(0), day_of(20421)
    ('1970-01-01', '2025-11-29')
    """
    return (dt.date(1970, 1, 1) + dt.timedelta(days=number)).isoformat()


@dataclasses.dataclass(frozen=True)
class Caps:
    """The configured caps (``[fleet.budget]``); None: no cap."""

    tokens_per_day: int | None = None
    cost_per_day: float | None = None
    agent_tokens_per_day: int | None = None
    agent_cost_per_day: float | None = None

    @classmethod
    def from_config(cls, config: FleetBudgetConfig) -> Caps:
        """The caps of ``[fleet.budget]``."""
        return cls(**{name: getattr(config, name) for name in CAP_NAMES})


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a turn may start (``ok``), else why not, in words."""

    ok: bool
    day: str
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Spending:
    """One scope's spending on one day, and the caps that apply to it now."""

    scope: str
    """``project`` or ``agent:NAME``."""
    day: str
    usage: Usage
    cost: float
    turns: int
    token_cap: int | None
    cost_cap: float | None

    @property
    def over(self) -> bool:
        """A cap is reached: no new turn starts in this scope today."""
        return (self.token_cap is not None and self.usage.total >= self.token_cap) or (
            self.cost_cap is not None and self.cost >= self.cost_cap
        )


def spending_words(s: Spending) -> str:
    """One scope's spending in words, with its caps.

    Examples
    --------
    >>> day = "2026-11-29"
    >>> spending_words(Spending("project", day, Usage(900, 100), 1.5, 4, 1000, None))
    '1,000 tokens of 1,000, cost 1.50 (no cap), 4 turns: OVER, new turns wait'
    >>> spending_words(Spending("agent:X", day, Usage(), 0.0, 0, None, 2.0))
    '0 tokens (no cap), cost 0.00 of 2.00, 0 turns'
    """
    tokens = f"{s.usage.total:,} tokens" + (
        " (no cap)" if s.token_cap is None else f" of {s.token_cap:,}"
    )
    cost = f"cost {s.cost:,.2f}" + (" (no cap)" if s.cost_cap is None else f" of {s.cost_cap:,.2f}")
    over = ": OVER, new turns wait" if s.over else ""
    return f"{tokens}, {cost}, {s.turns} turns{over}"


def _cap_arg(value: float | None, *, cost: bool) -> str:
    if value is None:
        return ""
    return str(round(value * MICROS)) if cost else str(int(value))


def _reason(agent: str, reply: Sequence[t.Any]) -> str:
    _, day, scope, field, used, cap = reply
    who = "the project" if scope == "project" else f"agent {agent}"
    key = f"{'agent_' if scope == 'agent' else ''}{field}_per_day"
    if field == "cost":
        amount = f"{int(used) / MICROS:,.2f} of cost, its cap is {int(cap) / MICROS:,.2f}"
    else:
        amount = f"{int(used):,} tokens, its cap is {int(cap):,}"
    return (
        f"{who} spent {amount} for {day_of(int(day))} (UTC) ([fleet.budget] {key}): "
        "new turns wait for the next day, a higher cap or a reset"
    )


class FleetBudget:
    """The budget breaker of one fleet project (see the module docstring).

    Parameters
    ----------
    queue
        The project's queue (its connection and keys).
    caps
        The configured caps; :meth:`set_cap` overrides them fleet-wide.
    """

    def __init__(self, queue: WorkQueue, caps: Caps | None = None) -> None:
        self.queue = queue
        self.caps = caps or Caps()
        client = queue.conn.client
        self._script = client.register_script(_BUDGET)
        self._today = client.register_script(_TODAY)
        self._held = client.register_script(_HELD)

    def _run(self, mode: str, agent: str, usage: Usage, cost: float) -> Verdict:
        check_name("agent", agent)
        if cost < 0 or usage.input < 0 or usage.output < 0:
            msg = f"{agent}: spending cannot be negative ({usage.words()}, cost {cost})"
            raise WorkInvalid(msg)
        c = self.caps
        what = "charging the fleet's budget" if mode == "charge" else "asking the fleet's budget"
        with self.queue.conn.talking(f"{what} for {agent}"):
            reply = self._script(
                keys=[self.queue.keys.budget_caps],
                args=[
                    self.queue.keys.prefix,
                    mode,
                    agent,
                    usage.input,
                    usage.output,
                    round(cost * MICROS),
                    _cap_arg(c.tokens_per_day, cost=False),
                    _cap_arg(c.cost_per_day, cost=True),
                    _cap_arg(c.agent_tokens_per_day, cost=False),
                    _cap_arg(c.agent_cost_per_day, cost=True),
                    (KEEP_DAYS + 1) * 86_400_000,
                ],
            )
        day = day_of(int(reply[1]))
        if reply[0] == "ok":
            return Verdict(ok=True, day=day)
        return Verdict(ok=False, day=day, reason=_reason(agent, reply))

    def admit(self, agent: str, spent: Usage | None = None, cost: float = 0.0) -> Verdict:
        """May a new turn of ``agent`` start? Counts the turn when it may (one script).

        ``spent`` and ``cost``: what the agent spent since it was last charged, charged
        first in the same script (so its last turn counts against the next one).
        """
        return self._run("admit", agent, spent or Usage(), cost)

    def peek(self, agent: str) -> Verdict:
        """Would a new turn of ``agent`` be admitted now? Counts nothing (one script).

        What a node asks while an agent's work is paused by a cap: the answer changes
        when the cap is raised or cleared, the spending reset, or the day (UTC) rolls over.
        """
        return self._run("peek", agent, Usage(), 0.0)

    def charge(self, agent: str, usage: Usage, cost: float = 0.0) -> Verdict:
        """Add what a turn of ``agent`` spent; the verdict for its next turn."""
        return self._run("charge", agent, usage, cost)

    def hold(self, label: str, agent: str, node: str, reason: str) -> None:
        """List a turn this breaker stopped that is no work on the queue, beside paused work.

        A router types the turns of the agents placed where it runs itself: a turn it holds
        back is listed with the queue's paused work (:meth:`Ledger.paused
        <politerm.fleet.ledger.Ledger.paused>`, ``poli fleet status``) as ``label``
        (:data:`HELD_PREFIX` + what it is for) until :meth:`release`. ``reason`` is redacted.
        """
        with self.queue.conn.talking(f"listing {agent}'s turn as paused"):
            self._held(
                keys=[self.queue.keys.paused],
                args=[label, check_name("agent", agent), node, self.queue.redact(reason)],
            )

    def release(self, labels: Sequence[str] | None = None) -> None:
        """Take turns :meth:`hold` listed off the paused list (None: every one of them).

        A router releases all of them when it starts: a router killed while it held a turn
        back left its listing behind, and the project has one router.
        """
        key = self.queue.keys.paused
        client = self.queue.conn.cmd
        with self.queue.conn.talking("taking held turns off the paused list"):
            if labels is None:
                labels = [k for k in client.hkeys(key) if str(k).startswith(HELD_PREFIX)]
            if labels:
                client.hdel(key, *labels)

    def set_cap(self, name: str, value: float | None, agent: str | None = None) -> None:
        """Set cap ``name`` (one of :data:`CAP_NAMES`) for the whole fleet; None: no cap.

        With ``agent``, only that agent's cap (``agent_tokens_per_day`` or
        ``agent_cost_per_day``). It wins over every node's configuration until
        :meth:`clear_caps`.
        """
        if name not in CAP_NAMES:
            msg = f"no budget cap {name!r}; the caps are {', '.join(CAP_NAMES)}"
            raise WorkInvalid(msg)
        if agent is not None and not name.startswith("agent_"):
            msg = f"{name} is the project's cap (an agent's: agent_tokens_per_day, …)"
            raise WorkInvalid(msg)
        # `not > 0` so that NaN is refused too; inf and a part of a token would not convert.
        if value is not None and not value > 0:
            msg = f"{name}: a cap must be > 0 (or none), got {value:g}"
            raise WorkInvalid(msg)
        if value is not None and not math.isfinite(value):
            msg = f"{name}: a cap must be a finite number (or none), got {value:g}"
            raise WorkInvalid(msg)
        if value is not None and "tokens" in name and not float(value).is_integer():
            msg = f"{name}: a cap in tokens is a whole number, got {value:g}"
            raise WorkInvalid(msg)
        field = name if agent is None else f"agent:{check_name('agent', agent)}:{name}"
        text = "none" if value is None else _cap_arg(value, cost="cost" in name)
        with self.queue.conn.talking(f"setting the fleet's budget cap {name}"):
            self.queue.conn.cmd.hset(self.queue.keys.budget_caps, field, text)

    def clear_caps(self) -> None:
        """Forget every cap set with :meth:`set_cap`: the configuration's apply again."""
        with self.queue.conn.talking("clearing the fleet's budget caps"):
            self.queue.conn.cmd.delete(self.queue.keys.budget_caps)

    def _day(self) -> int:
        return int(self._today())

    def reset(self, agent: str | None = None) -> None:
        """Forget today's spending of the project (None) or of one agent."""
        scope = "project" if agent is None else f"agent:{check_name('agent', agent)}"
        with self.queue.conn.talking(f"resetting today's budget of {scope}"):
            self.queue.conn.cmd.delete(self.queue.keys.budget(str(self._day()), scope))

    def spending(self, agents: Sequence[str] = ()) -> list[Spending]:
        """Today's spending of the project and of each of ``agents``, with the caps in force."""
        keys = self.queue.keys
        scopes = ["project", *(f"agent:{check_name('agent', a)}" for a in agents)]
        with self.queue.conn.talking("reading the fleet's budget"):
            day = self._day()
            overrides = self.queue.conn.cmd.hgetall(keys.budget_caps)
            pipe = self.queue.conn.cmd.pipeline(transaction=False)
            for scope in scopes:
                pipe.hgetall(keys.budget(str(day), scope))
            raws = pipe.execute()
        out = []
        for scope, raw in zip(scopes, raws, strict=True):
            agent = scope.partition(":")[2]
            prefix = "agent_" if agent else ""
            tokens = self._cap(overrides, f"{prefix}tokens_per_day", agent)
            cost = self._cap(overrides, f"{prefix}cost_per_day", agent)
            out.append(
                Spending(
                    scope=scope,
                    day=day_of(day),
                    usage=Usage(int(raw.get("input", 0)), int(raw.get("output", 0))),
                    cost=int(raw.get("cost", 0)) / MICROS,
                    turns=int(raw.get("turns", 0)),
                    token_cap=None if tokens is None else int(tokens),
                    cost_cap=cost,
                )
            )
        return out

    def _cap(self, overrides: dict[str, str], name: str, agent: str) -> float | None:
        raw = overrides.get(f"agent:{agent}:{name}") if agent else None
        raw = raw if raw is not None else overrides.get(name)
        if raw is None:
            value: float | None = getattr(self.caps, name)
            return value
        if raw == "none":
            return None
        return int(raw) / MICROS if "cost" in name else float(int(raw))
