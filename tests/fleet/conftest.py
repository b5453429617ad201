"""Fixtures of the fleet tests: a real redis-server per test (tests/fleet/redisserver.py)."""

from __future__ import annotations

import pathlib
import typing as t

import pytest

from tests.fleet.netns import FleetNet, make_net
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


@pytest.fixture
def fleet_net() -> t.Iterator[FleetNet]:
    """Machines a, b, c each in a network namespace of its own, or loopback (it says why)."""
    net = make_net(("a", "b", "c"))
    try:
        yield net
    finally:
        net.close()


@pytest.fixture
def net_redis(fleet_net: FleetNet, tmp_path: pathlib.Path) -> t.Iterator[RedisServer]:
    """A private redis-server listening on loopback and on every machine's link."""
    server = RedisServer(tmp_path / "redis", binds=fleet_net.binds())
    try:
        server.start()
        yield server
    finally:
        server.stop()
