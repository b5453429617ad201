"""Nothing secret reaches Redis: payloads, outcomes, late results and errors are redacted first.

After a piece of work has gone through every path (submitted, given back, claimed again,
completed late by a fenced attempt, completed), every key of the server is read back whole
(hashes, streams, sets, sorted sets, strings) and so is the AOF on disk: no secret is there.
"""

from __future__ import annotations

import typing as t

import pytest

from politerm.errors import Fenced
from politerm.fleet import Work, WorkKind, WorkQueue, connect
from politerm.redact import Redactor
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer

SECRETS = {
    "github": "ghp_" + "Z" * 36,
    "anthropic": "sk-ant-api03-" + "q" * 40,
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
    "custom": "ACME-7f3e9c2b1a",
}


def everything_in(queue: WorkQueue) -> str:
    """Every key and every value the server holds, as one text."""
    r = queue.conn.cmd
    parts: list[str] = []
    for key in r.scan_iter(count=1000):
        parts.append(key)
        kind = r.type(key)
        if kind == "hash":
            parts.extend(f"{k}={v}" for k, v in r.hgetall(key).items())
        elif kind == "stream":
            for entry, fields in r.xrange(key):
                parts.append(entry)
                parts.extend(f"{k}={v}" for k, v in fields.items())
        elif kind == "set":
            parts.extend(r.smembers(key))
        elif kind == "zset":
            parts.extend(r.zrange(key, 0, -1))
        elif kind == "string":
            parts.append(r.get(key))
        else:
            parts.append(f"unread type {kind}")
    return "\n".join(parts)


def test_no_secret_of_a_payload_or_an_outcome_ever_reaches_redis(
    redis_server: RedisServer,
) -> None:
    redactor = Redactor([r"ACME-[0-9a-f]{10}"])  # a project's [redact] pattern
    kept: dict[str, str] = {}

    def redact(text: str) -> str:
        out, found = redactor.tagged(text)
        kept.update(found)  # what a node's vault keeps for its own agents
        return out

    def queue() -> WorkQueue:
        return WorkQueue(connect(redis_server.url), "shop", redact=redact, lease=0.5, margin=0.1)

    node_a, node_b = queue(), queue()
    every = " ".join(SECRETS.values())
    node_a.submit(
        Work(
            "w1",
            "EXECUTER",
            WorkKind.TURN,
            {"prompt": f"use {every}", "nested": [{"env": f"password={SECRETS['custom']}"}]},
        )
    )
    first = node_a.claim("a", ["EXECUTER"])
    assert first is not None
    assert SECRETS["github"] not in str(first.work.payload)
    assert "[REDACTED:github-token#" in first.work.payload["prompt"]
    node_a.give_back(first, f"could not start: {SECRETS['anthropic']}")
    second = node_a.claim("a", ["EXECUTER"])
    assert second is not None
    third = retry_until(lambda: node_b.claim("b", ["EXECUTER"]), 10, what="b's re-claim")
    # The fenced attempt's late outcome is recorded, redacted like the rest.
    with pytest.raises(Fenced) as fenced:
        node_a.complete(second, {"reply": f"late {every}"})
    assert SECRETS["aws"] not in str(fenced.value)
    assert "[REDACTED:aws-access-key#" in node_a.ledger.late_results()[0].outcome["reply"]
    node_b.complete(third, {"reply": f"done with {every}", "files": [SECRETS["custom"]]})
    result = node_a.wait_result("w1", timeout=5)
    assert "[REDACTED:custom#" in result.outcome["files"][0]
    assert set(kept.values()) >= set(SECRETS.values())

    stored = everything_in(node_a)
    assert "[REDACTED:" in stored
    on_disk = [p for p in redis_server.directory.rglob("*") if p.is_file()]
    aof = b"".join(p.read_bytes() for p in on_disk)
    for name, secret in SECRETS.items():
        assert secret not in stored, name
        assert secret.encode() not in aof, name
