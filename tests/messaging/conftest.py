"""The mail room fixture: a session of fake agents on the test's private tmux server."""

from __future__ import annotations

import typing as t

import pytest

from tests.messaging.mailroom import Mailroom, open_mailroom

if t.TYPE_CHECKING:
    import pathlib

    import libtmux


@pytest.fixture
async def room(server: libtmux.Server, tmp_path: pathlib.Path) -> t.AsyncIterator[Mailroom]:
    assert server.socket_name is not None
    r = await open_mailroom(tmp_path, server.socket_name)
    try:
        yield r
    finally:
        await r.close()
        await r.server.close()
