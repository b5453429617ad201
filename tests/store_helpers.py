"""Shared by the run store's tests: a settable clock, a store on it, and a message adder.

The fixtures are registered under their short names (``store_path``, ``clock``, ``store``);
a test module imports the ``*_fixture`` functions so that pytest finds them there.
"""

from __future__ import annotations

import pathlib
import stat
import typing as t

import pytest

from politerm.store import Message, MessageState, RunStore


class FakeClock:
    """A settable clock so TTLs and timestamps are deterministic."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(name="store_path")
def store_path_fixture(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "state" / "runs.sqlite3"


@pytest.fixture(name="clock")
def clock_fixture() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="store")
def store_fixture(store_path: pathlib.Path, clock: FakeClock) -> t.Iterator[RunStore]:
    with RunStore.open(store_path, clock=clock) as s:
        yield s


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def add(
    store: RunStore,
    key: str,
    *,
    recipient: str = "executer",
    task_id: str | None = None,
    state: MessageState = MessageState.QUEUED,
    ttl: float | None = None,
) -> Message:
    msg = store.add_message(
        task_id=task_id,
        sender="planner",
        recipient=recipient,
        type="task",
        msg_id=f"id-{key}",
        body=f"body of {key}",
        header={"key": key},
        nonce="n0",
        dedupe_key=key,
        state=state,
        ttl=ttl,
    )
    assert msg is not None
    return msg
