"""Connecting to the fleet's Redis: refused URLs, auth failures, a dead or paused server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import typing as t

import pytest

from politerm.errors import FleetAuthError, FleetRefused, FleetUnavailable
from politerm.fleet import Caps, FleetBudget, Registry, Work, WorkQueue, connect
from politerm.protocol.usage import Usage
from tests.fleet.redisserver import RedisServer

if t.TYPE_CHECKING:
    from pathlib import Path

SECRET = "hunter2hunter2"


class RefusedCase(t.NamedTuple):
    test_id: str
    url: str
    message: str


REFUSED = [
    RefusedCase(
        "no-credentials-remote",
        "redis://10.0.0.5:6379/0",
        "redis://10.0.0.5:6379/0: refused: Redis on another machine needs an ACL user",
    ),
    RefusedCase(
        "user-without-password-remote",
        "rediss://poli@redis.example/0",
        "rediss://poli@redis.example/0: refused",
    ),
    RefusedCase(
        "query-could-weaken-tls",
        f"rediss://poli:{SECRET}@redis.example/0?ssl_cert_reqs=none",
        "rediss://poli:***@redis.example/0?ssl_cert_reqs=none: query parameters are not",
    ),
    RefusedCase("scheme", f"http://poli:{SECRET}@h/0", "http://poli:***@h/0: expected redis://"),
    RefusedCase(
        "database", f"redis://poli:{SECRET}@h/zero", "redis://poli:***@h/zero: not a redis:// URL"
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.test_id for c in REFUSED])
def test_a_url_is_refused_before_any_packet_and_the_message_hides_the_password(
    case: RefusedCase,
) -> None:
    with pytest.raises(FleetRefused) as info:
        connect(case.url)
    assert str(info.value).startswith(case.message)
    assert SECRET not in str(info.value)


def test_a_password_from_the_environment_makes_a_remote_url_acceptable() -> None:
    conn = connect("rediss://poli@redis.example/0", password=SECRET)
    assert conn.where == "rediss://poli:***@redis.example/0"
    assert SECRET not in repr(conn)
    conn.close()


def test_a_ca_file_needs_tls_and_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FleetRefused, match="ca_file is given, but the URL is redis://"):
        connect(f"redis://poli:{SECRET}@h/0", ca_file=tmp_path / "ca.pem")
    with pytest.raises(FleetRefused, match=r"ca_file: .*ca.pem: no such file"):
        connect(f"rediss://poli:{SECRET}@h/0", ca_file=tmp_path / "ca.pem")


def test_loopback_without_credentials_connects_but_the_servers_acl_refuses_it(
    redis_server: RedisServer,
) -> None:
    conn = connect(redis_server.anonymous_url, timeout=2.0)
    with pytest.raises(FleetAuthError, match=r"refused us \(checking the connection\)"):
        conn.ping()


def test_a_wrong_password_is_an_auth_error_that_does_not_show_it(
    redis_server: RedisServer,
) -> None:
    url = redis_server.url.replace(redis_server.password, SECRET)
    conn = connect(url, timeout=2.0)
    with pytest.raises(FleetAuthError) as info:
        conn.ping()
    assert SECRET not in str(info.value)
    assert f"redis://poli:***@127.0.0.1:{redis_server.port}/0" in str(info.value)


def test_a_dead_server_is_unavailable_and_a_paused_one_times_out_naming_what_waited(
    redis_server: RedisServer,
) -> None:
    queue = WorkQueue(connect(redis_server.url, timeout=0.5), "shop", lease=5.0, margin=1.0)
    queue.submit(Work("w1", "EXECUTER"))
    redis_server.pause()
    try:
        with pytest.raises(FleetUnavailable) as info:
            queue.claim("a", ["EXECUTER"])
        assert str(info.value) == (
            f"Redis at redis://poli:***@127.0.0.1:{redis_server.port}/0 did not answer within "
            "0.5 s (claiming work for EXECUTER as node a)"
        )
    finally:
        redis_server.resume()
    redis_server.kill()
    with pytest.raises(FleetUnavailable, match=r"cannot reach Redis at redis://poli:\*\*\*@") as e:
        queue.submit(Work("w2", "EXECUTER"))
    assert "(submitting work w2 for EXECUTER)" in str(e.value)
    assert redis_server.password not in str(e.value)


def test_a_server_that_speaks_no_redis_is_unavailable_in_one_line() -> None:
    # What a proxy or web server on the port answers: no Redis reply at all.
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer() -> None:
            peer, _ = listener.accept()
            with peer:
                peer.recv(1024)
                peer.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        server = threading.Thread(target=answer, daemon=True)
        server.start()
        port = listener.getsockname()[1]
        queue = WorkQueue(
            connect(f"redis://127.0.0.1:{port}/0", timeout=5.0), "shop", lease=5.0, margin=1.0
        )
        with pytest.raises(FleetUnavailable) as info:
            queue.submit(Work("w1", "EXECUTER"))
        server.join(timeout=5.0)
    message = str(info.value)
    assert message.startswith(f"cannot use Redis at redis://127.0.0.1:{port}/0 (submitting")
    assert "\n" not in message


def test_the_documented_acl_user_is_enough_for_every_call(tmp_path: Path) -> None:
    # docs/fleet.md's user: the project's keys only, no dangerous commands.
    server = RedisServer(tmp_path / "redis", acl="~poli:* &* +@all -@dangerous")
    server.start()
    try:
        queue = WorkQueue(connect(server.url), "shop", lease=30.0, margin=5.0)
        queue.submit(Work("w1", "EXECUTER", payload={"p": 1}))
        lease = queue.claim("a", ["EXECUTER"], block_ms=10)
        assert lease is not None
        lease = queue.check(lease)
        queue.complete(lease, {"ok": 1})
        assert queue.wait_result("w1", timeout=5).outcome == {"ok": 1}
        assert queue.leases() == []
        assert queue.ledger.late_results() == []
        assert queue.ledger.dead_letters() == []
        registry = Registry(queue)
        registry.heartbeat("a", ["EXECUTER"], {"busy": 0}, every=5.0)
        [node] = registry.nodes()
        assert (node.name, node.alive, node.agents, node.lag) == ("a", True, ("EXECUTER",), 0)
        budget = FleetBudget(queue, Caps(tokens_per_day=10))
        assert budget.admit("EXECUTER").ok
        budget.charge("EXECUTER", Usage(5, 5))
        budget.set_cap("tokens_per_day", 20)
        budget.reset()
        assert [s.usage.total for s in budget.spending(["EXECUTER"])] == [0, 10]
        # Outside the project's keys, the server refuses the user.
        with (
            pytest.raises(
                FleetAuthError, match=r"refused us \(a test\): this user has no permissions"
            ),
            queue.conn.talking("a test"),
        ):
            queue.conn.cmd.set("other:key", "x")
    finally:
        server.stop()


def test_without_redis_py_the_fleet_says_which_extra_to_install() -> None:
    # A plain `pip install politerm` has no redis-py: the fleet's first import says so.
    code = (
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "from politerm.errors import FleetError\n"
        "try:\n"
        "    import politerm.fleet.connect\n"
        "except FleetError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "a fleet needs redis-py: pip install 'politerm[fleet]'"
