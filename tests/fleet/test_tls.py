"""``rediss://``: the server's certificate and host name are verified (a real TLS Redis)."""

from __future__ import annotations

import re
import typing as t

import pytest

from politerm.errors import FleetUnavailable
from politerm.fleet import Work, WorkQueue, connect
from tests.fleet.redisserver import RedisServer, make_tls_files

if t.TYPE_CHECKING:
    import pathlib


@pytest.fixture
def tls_server(tmp_path: pathlib.Path) -> t.Iterator[RedisServer]:
    """A private redis-server that speaks TLS only, with a certificate for ``localhost``."""
    server = RedisServer(tmp_path / "redis", tls=make_tls_files(tmp_path / "tls"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_tls_with_the_servers_ca_works(tls_server: RedisServer) -> None:
    assert tls_server.tls is not None
    queue = WorkQueue(connect(tls_server.tls_url(), ca_file=tls_server.tls.ca), "shop")
    assert queue.submit(Work("w1", "EXECUTER", payload={"p": 1}))
    lease = queue.claim("a", ["EXECUTER"])
    assert lease is not None
    queue.complete(lease, {"ok": True})


class Refused(t.NamedTuple):
    test_id: str
    url: t.Callable[[RedisServer], str]
    with_ca: bool
    detail: str


REFUSED = [
    Refused("unknown-ca", lambda s: s.tls_url(), False, "certificate verify failed"),
    Refused("wrong-host", lambda s: s.tls_url("127.0.0.1"), True, "IP address mismatch"),
    # TLS only: a plain client is cut off (closed or reset, as the timing falls).
    Refused("plain-to-tls", lambda s: s.url, False, "Connection (closed|reset)"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.test_id for c in REFUSED])
def test_a_certificate_that_does_not_verify_is_refused(
    tls_server: RedisServer, case: Refused
) -> None:
    assert tls_server.tls is not None
    conn = connect(case.url(tls_server), ca_file=tls_server.tls.ca if case.with_ca else None)
    with pytest.raises(FleetUnavailable, match="cannot reach Redis at") as info:
        conn.ping()
    assert re.search(case.detail, str(info.value))
    assert tls_server.password not in str(info.value)
