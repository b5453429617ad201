"""The fleet tests' redis-server: authenticated, durable across kill -9, pausable."""

from __future__ import annotations

import pytest
import redis

from tests.fleet.redisserver import RedisServer


def test_the_server_refuses_the_default_user_and_keeps_acknowledged_writes_across_kill_9(
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    entry = client.xadd("s", {"k": "v"})
    anonymous = redis.Redis.from_url(redis_server.anonymous_url)
    with pytest.raises((redis.AuthenticationError, redis.ResponseError), match=r"(?i)auth"):
        anonymous.ping()
    redis_server.restart()
    client = redis.Redis.from_url(redis_server.url)
    entries = client.xrange("s") or []
    assert [e[0] for e in entries] == [entry]


def test_a_scripts_writes_survive_kill_9(redis_server: RedisServer) -> None:
    # Redis replays a script's effects from the AOF as MULTI/EXEC run by the default user;
    # with that user switched off it drops them silently (redis/redis#14541).
    client = redis.Redis.from_url(redis_server.url)
    client.eval("redis.call('SET', KEYS[1], 'kept'); return 1", 1, "k")
    redis_server.restart()
    client = redis.Redis.from_url(redis_server.url)
    assert client.get("k") == b"kept"
