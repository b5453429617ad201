"""Fixtures of the fleet tests: a real redis-server per test (tests/fleet/redisserver.py)."""

from __future__ import annotations

import pathlib
import typing as t

import pytest

from tests.fleet.redisserver import RedisServer


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> t.Iterator[RedisServer]:
    """A private redis-server (ACL user and password, AOF on) for this test only."""
    server = RedisServer(tmp_path / "redis")
    try:
        server.start()
        yield server
    finally:
        server.stop()
