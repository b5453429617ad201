"""Fixtures for the real-CLI end-to-end tests: installed CLIs, the mock model, a rig."""

from __future__ import annotations

import typing as t

import pytest

from politerm.testing.mockllm import MockLLM
from tests.realcli.helpers import AgentSpec, Rig, write_rig
from tests.realcli.install import Installed, InstallError, ensure_installed

if t.TYPE_CHECKING:
    import pathlib

    import libtmux

_INSTALL: list[Installed | InstallError] = []


@pytest.fixture(scope="session")
def installed() -> Installed:
    """The five CLIs, installed into ``.cache/realcli/`` once per session when missing.

    A CLI that cannot be installed fails every test that needs it, with the reason.
    """
    if not _INSTALL:
        try:
            _INSTALL.append(ensure_installed())
        except InstallError as exc:
            _INSTALL.append(exc)
    result = _INSTALL[0]
    if isinstance(result, InstallError):
        pytest.fail(f"the real agent CLIs could not be installed: {result}", pytrace=False)
    return result


@pytest.fixture
def llm() -> t.Iterator[MockLLM]:
    """This test's mock model server (rules are added by the test)."""
    server = MockLLM().start()
    yield server
    server.stop()


RigFactory = t.Callable[..., t.Awaitable[Rig]]


@pytest.fixture
async def rig(
    server: libtmux.Server,
    tmp_path: pathlib.Path,
    llm: MockLLM,
    installed: Installed,
) -> t.AsyncIterator[RigFactory]:
    """``await rig({"NAME": AgentSpec(...)})``: write, open and start a project of real agents.

    At teardown the session goes down and no agent process may be left.
    """
    assert server.socket_name is not None
    rigs: list[Rig] = []

    async def start(agents: dict[str, AgentSpec], *, up: bool = True, **kw: t.Any) -> Rig:
        r = write_rig(tmp_path / "proj", str(server.socket_name), llm, installed, agents, **kw)
        rigs.append(r)
        if up:
            await r.up()
        return r

    yield start
    for r in rigs:
        await r.close()
