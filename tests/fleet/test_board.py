"""The agents' board against a real redis-server: rows, Redis's times, lost publishers, log."""

from __future__ import annotations

import asyncio
import typing as t

from politerm.fleet import Board, WorkQueue, connect
from politerm.fleet.board import LOST, MAX_TEXT
from politerm.testing.retry import retry_until

if t.TYPE_CHECKING:
    from tests.fleet.redisserver import RedisServer

SECRET = "sk-ant-api03-" + "Z" * 40


def make_board(server: RedisServer) -> Board:
    return Board(WorkQueue(connect(server.url, timeout=2.0), "shop"))


def test_rows_carry_redis_times_and_a_state_keeps_its_since(redis_server: RedisServer) -> None:
    board = make_board(redis_server)
    first = board.publish("b", {"EXECUTER": {"state": "busy", "turn": "T-1", "profile": "fake"}})
    board.publish("b", {"EXECUTER": {"state": "busy", "turn": "T-1", "profile": "fake"}})
    (row,) = board.rows()
    assert (row.agent, row.node, row.state, row.turn, row.lost) == (
        "EXECUTER",
        "b",
        "busy",
        "T-1",
        False,
    )
    # 'since' is Redis's time of the state's first publish: the same state keeps it.
    assert row.since == first / 1000 and row.at >= row.since
    later = board.publish("b", {"EXECUTER": {"state": "ready", "profile": "fake"}})
    (row,) = board.rows()
    assert row.state == "ready" and row.since == later / 1000 and row.turn is None


def test_a_row_is_redacted_and_bounded(redis_server: RedisServer) -> None:
    board = make_board(redis_server)
    what = f"Bash(curl -H 'x-api-key: {SECRET}' example.org) " + "y" * 500
    board.publish(
        "b",
        {
            "EXECUTER": {
                "state": "waiting_approval",
                "approval": {"what": what, "command": what, "asked": 1.5},
            }
        },
    )
    (row,) = board.rows()
    assert row.approval is not None and row.approval["asked"] == 1.5
    for text in (row.approval["what"], row.approval["command"]):
        assert SECRET not in text and "REDACTED" in text and len(text) <= MAX_TEXT
    raw = board.queue.conn.cmd.hgetall(board.queue.keys.board)
    assert SECRET not in repr(raw)
    assert all(len(v) < 1024 for v in raw.values())


def test_a_publisher_that_stops_beating_shows_its_agents_lost(redis_server: RedisServer) -> None:
    board = make_board(redis_server)
    board.publish("a", {"PLANNER": {"state": "ready"}}, role="router", every=60)
    board.publish(
        "b", {"EXECUTER": {"state": "waiting_approval", "approval": {"what": "ls"}}}, every=0.05
    )
    # b beats every 50 ms and stopped: after 3 missed beats (Redis's expiry) its rows are lost.
    planner, executer = retry_until(
        lambda: rows if (rows := board.rows())[1].lost else None,
        10,
        what="node b's rows to read lost",
    )
    assert (planner.agent, planner.node, planner.state, planner.lost) == (
        "PLANNER",
        "a",
        "ready",
        False,
    )
    assert (executer.agent, executer.node, executer.state) == ("EXECUTER", "b", LOST)
    assert (executer.last_state, executer.approval) == ("waiting_approval", None)
    board.publish("b", {}, every=60)  # its beat alone: alive again, its last row stands
    executer = next(r for r in board.rows() if r.agent == "EXECUTER")
    assert (executer.state, executer.lost) == ("waiting_approval", False)


def test_the_log_names_what_changed(redis_server: RedisServer) -> None:
    board = make_board(redis_server)
    start = board.last_change()
    board.publish("b", {"EXECUTER": {"state": "busy"}, "REVIEWER": {"state": "ready"}})
    board.publish("c", {})  # a beat changes no row: no entry
    after, changed = board.changes(start, 1.0)
    assert changed == {"b/EXECUTER", "b/REVIEWER"}
    assert [r.agent for r in board.rows(changed)] == ["EXECUTER", "REVIEWER"]
    assert board.changes(after, 0.05) == (after, set())


async def test_a_feed_follows_changes_and_tells_its_listeners(redis_server: RedisServer) -> None:
    from politerm.engine.fleetboard import BoardFeed

    board = make_board(redis_server)
    board.publish("b", {"EXECUTER": {"state": "ready"}}, every=60)
    heard: list[set[str]] = []
    async with BoardFeed(board, every=60) as feed:
        feed.listen(heard.append)
        assert feed.of("EXECUTER") is not None and feed.of("EXECUTER").state == "ready"  # type: ignore[union-attr]
        woken = feed.event()
        await asyncio.to_thread(
            board.publish,
            "b",
            {"EXECUTER": {"state": "waiting_approval", "approval": {"what": "ls"}}},
        )
        await asyncio.wait_for(woken.wait(), 10)  # bounded: the feed saw the change
        row = feed.of("EXECUTER")
        assert row is not None and row.state == "waiting_approval" and row.approval is not None
        assert heard == [{"EXECUTER"}]
        assert [r["node"] for r in feed.snapshot()] == ["b"]
