"""``poli doctor``'s fleet row: Redis answers and accepts the user, keeps an AOF (real Redis)."""

from __future__ import annotations

import typing as t

from politerm.doctor import DoctorContext, Status, check_fleet, run_checks
from tests.fleet.redisserver import RedisServer

if t.TYPE_CHECKING:
    import pathlib


def rows(project: pathlib.Path, toml: str) -> list[tuple[Status, str, str]]:
    (project / "poli.toml").write_text(toml)
    found = run_checks(DoctorContext(project_dir=project, env={}), [check_fleet])
    return [(r.status, r.detail, r.fix) for r in found]


def test_no_fleet_no_row(tmp_path: pathlib.Path) -> None:
    assert rows(tmp_path, "") == []


def test_a_healthy_redis_then_one_without_aof_then_a_dead_one(
    tmp_path: pathlib.Path, redis_server: RedisServer
) -> None:
    toml = f'[fleet]\nurl = "{redis_server.url}"\nnode = "a"\n'
    [(status, detail, _)] = rows(tmp_path, toml)
    assert status is Status.OK, detail
    assert detail.startswith("Redis 7.")
    assert detail.endswith(f"at redis://poli:***@127.0.0.1:{redis_server.port}/0 accepts node a")

    import redis

    redis.Redis.from_url(redis_server.url).config_set("appendonly", "no")
    [_, (status, detail, fix)] = rows(tmp_path, toml)
    assert status is Status.WARN
    assert "keeps no AOF: a restart loses acknowledged work" in detail
    assert fix == "appendonly yes, appendfsync always (docs/fleet.md)"

    wrong = toml.replace(redis_server.password, "not-the-password")
    [(status, detail, fix)] = rows(tmp_path, wrong)
    assert (status, "not-the-password" in detail) == (Status.FAIL, False)
    assert fix.startswith("check the ACL user and the password")

    redis_server.kill()
    [(status, detail, fix)] = rows(tmp_path, toml)
    assert status is Status.FAIL
    assert detail.startswith("cannot reach Redis at redis://poli:***@")
    assert redis_server.password not in detail


def test_the_documented_acl_user_gets_an_ok_row_without_info(tmp_path: pathlib.Path) -> None:
    server = RedisServer(tmp_path / "redis", acl="~poli:* &* +@all -@dangerous")
    server.start()
    try:
        toml = f'[fleet]\nurl = "{server.url}"\nnode = "a"\n'
        [(status, _, _)] = rows(tmp_path, toml)
        assert status is Status.OK  # INFO is refused to it: nothing said about the AOF
    finally:
        server.stop()


def test_an_unauthenticated_remote_url_is_a_failed_row(tmp_path: pathlib.Path) -> None:
    [(status, detail, fix)] = rows(tmp_path, '[fleet]\nurl = "redis://10.0.0.5:6379/0"\n')
    assert status is Status.FAIL
    assert "refused: Redis on another machine needs an ACL user" in detail
    assert fix == "see docs/fleet.md: Redis setup"
