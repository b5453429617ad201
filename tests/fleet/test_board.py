"""The agents' board against a real redis-server: rows, Redis's times, lost publishers, log."""

from __future__ import annotations

import asyncio
import json
import typing as t

from politerm.fleet import Board, WorkQueue, connect
from politerm.fleet.board import LOST, MAX_TEXT
from politerm.store import RunStore
from politerm.testing.retry import aretry_until, retry_until

if t.TYPE_CHECKING:
    import pathlib

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


async def test_status_watch_redraws_when_another_node_publishes(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from politerm.engine.fleetboard import BoardFeed
    from politerm.livestatus import watch
    from politerm.status import collect, merge_fleet

    board = make_board(redis_server)
    board.publish("b", {"EXECUTER": {"state": "ready"}}, every=60)
    frames: list[dict[str, t.Any]] = []
    stop = asyncio.Event()
    with RunStore.open(tmp_path / "store.db") as store:
        async with BoardFeed(board, every=60) as feed:

            def with_board(*args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
                return merge_fleet(collect(*args, **kwargs), feed.snapshot(), "c", ())

            def shown(state: str) -> bool:
                return any(
                    (a["name"], a["node"], a["state"]) == ("EXECUTER", "b", state)
                    for f in frames
                    for a in f["agents"]
                )

            watching = asyncio.create_task(
                watch(store, None, frames.append, collect=with_board, stop=stop, also=feed.event)
            )
            try:
                await aretry_until(_now(shown, "ready"), 10, what="the first frame")
                # No commit to this store: the board's change alone redraws the view.
                await asyncio.to_thread(
                    board.publish, "b", {"EXECUTER": {"state": "busy"}}, every=60
                )
                await aretry_until(_now(shown, "busy"), 10, what="a redraw with b's change")
            finally:
                stop.set()
                await asyncio.wait_for(watching, 10)


def _now(check: t.Callable[[str], bool], state: str) -> t.Callable[[], t.Awaitable[bool]]:
    async def look() -> bool:
        return check(state)

    return look


def test_status_on_a_node_says_when_redis_cannot_be_reached_and_answer_where_to_go(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from tests.fleet.nodes import make_fleet

    (c,) = make_fleet(tmp_path, redis_server, ["c"]).values()
    redis_server.stop()
    shown = c.poli("status")
    assert shown.returncode == 0, shown.stderr
    assert "other nodes' agents not shown: cannot reach Redis" in shown.stdout, shown.stdout
    assert redis_server.password not in shown.stdout + shown.stderr
    as_json = c.poli("status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert "cannot reach Redis" in json.loads(as_json.stdout)["fleet"]["board_error"]
    # A task this machine does not hold is answered through Redis: one line saying why not.
    said = c.poli("answer", "T-9", "yes")
    assert said.returncode != 0 and "Traceback" not in said.stderr
    assert said.stderr.count("\n") == 1 and "cannot reach Redis" in said.stderr, said.stderr
    assert redis_server.password not in said.stderr


async def test_a_publisher_sends_its_own_agents_changes_once_each(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from politerm.agents.approval import PendingApproval, set_pending
    from politerm.engine.fleetboard import BoardPublisher

    board = make_board(redis_server)
    with RunStore.open(tmp_path / "store.db") as store:
        for name, session in (("EXECUTER", "s-node"), ("PLANNER", "s")):
            store.upsert_agent(
                name, session=session, pane_id="%1", command="x", cwd=".", profile="fake",
                resume_command=None,
            )  # fmt: skip
        store.set_agent_state("EXECUTER", "busy")
        publisher = BoardPublisher(store, board, "b", ["EXECUTER", "PLANNER"], "s-node", every=60)
        stop = asyncio.Event()
        running = asyncio.create_task(publisher.run(stop))

        def row() -> t.Any:
            found = [r for r in board.rows() if r.agent == "EXECUTER"]
            return found[0] if found else None

        try:
            first = await asyncio.to_thread(retry_until, row, 10, what="EXECUTER published")
            assert (first.node, first.state) == ("b", "busy")
            # PLANNER is another session's (the router's on this machine): not this one's.
            assert [r.agent for r in board.rows()] == ["EXECUTER"]
            sent = publisher.published
            store.add_event("note", detail="a commit that changes no row of its agents")
            set_pending(store, PendingApproval("EXECUTER", "Bash", "ls", ("Run ls?",), 7.5))
            store.set_agent_state("EXECUTER", "waiting_approval")

            def asking() -> t.Any:
                r = row()
                return r if r.approval is not None else None

            asked = await asyncio.to_thread(retry_until, asking, 10, what="the question published")
            assert asked.state == "waiting_approval" and asked.approval["asked"] == 7.5
            assert "ls" in asked.approval["what"]
            # Each publish is one script call; the commit that changed nothing sent nothing.
            assert publisher.published - sent <= 2
        finally:
            stop.set()
            await asyncio.wait_for(running, 10)


def _reads_back(board: Board) -> int:
    """How many times Redis was asked for board rows (``HGETALL``, ``HMGET``) so far."""
    stats = board.queue.conn.cmd.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("hgetall", "hmget"))


async def test_a_feed_takes_each_change_from_the_log_and_a_lost_publisher_from_its_beat(
    redis_server: RedisServer,
) -> None:
    from politerm.engine.fleetboard import BoardFeed

    board = make_board(redis_server)
    board.publish("b", {"EXECUTER": {"state": "ready"}}, every=0.2)  # lost 0.6 s after
    board.publish("c", {"PLANNER": {"state": "ready"}}, every=60)
    async with BoardFeed(board, every=0.2) as feed:
        before = _reads_back(board)
        woken = feed.event()
        await asyncio.to_thread(board.publish, "c", {"PLANNER": {"state": "busy"}}, every=60)
        await asyncio.wait_for(woken.wait(), 10)  # bounded: the feed saw the change
        planner = feed.of("PLANNER")
        assert planner is not None and (planner.state, planner.lost) == ("busy", False)

        # b stopped beating: its row reads lost, from its beat alone.
        def lost() -> bool:
            row = feed.of("EXECUTER")
            return row is not None and row.lost

        await aretry_until(lambda: asyncio.sleep(0, lost()), 10, what="b's row to read lost")
        executer = feed.of("EXECUTER")
        assert executer is not None and (executer.state, executer.last_state) == (LOST, "ready")
        # Neither the change nor the lost beat made the feed read a row back from Redis.
        assert _reads_back(board) == before


def test_a_tasks_question_is_published_bounded_and_removed_with_its_publisher(
    redis_server: RedisServer,
) -> None:
    board = make_board(redis_server)
    start = board.last_change()
    question = f"Which key? {SECRET} " + "y" * 500
    ask = {"question": question, "agent": "PLANNER", "asked": 4.5}
    board.publish("a", {}, role="router", every=60, asks={"T-1": ask, "T-2": ask})
    board.publish("b", {}, role="router", every=60, asks={"T-9": ask})
    after, changed = board.changes(start, 1.0)
    assert changed == {"?a/T-1", "?a/T-2", "?b/T-9"}
    one, two, nine = board.asks()
    assert (one.task, one.node, one.agent, one.asked) == ("T-1", "a", "PLANNER", 4.5)
    assert not one.lost
    assert SECRET not in one.question and "REDACTED" in one.question
    assert len(one.question) <= MAX_TEXT and (two.task, nine.node) == ("T-2", "b")
    raw = board.queue.conn.cmd.hgetall(board.queue.keys.board_asks)
    assert SECRET not in repr(raw) and all(len(v) < 1024 for v in raw.values())
    # Answered: None removes it, and the log says so.
    board.publish("a", {}, role="router", every=60, asks={"T-1": None})
    assert board.changes(after, 1.0)[1] == {"?a/T-1"}
    assert [a.task for a in board.asks()] == ["T-2", "T-9"]
    # A publisher that restarted names all its open questions: its others go, b's stay.
    board.publish("a", {}, role="router", every=60, asks={}, full=True)
    assert [a.task for a in board.asks()] == ["T-9"]
    # b's router stops beating: its question reads lost.
    board.publish("b", {}, role="router", every=0.05)
    retry_until(lambda: board.asks()[0].lost, 10, what="b's question to read lost")


async def test_a_routers_publisher_publishes_its_tasks_questions_until_answered(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    from politerm.engine.fleetboard import BoardFeed, BoardPublisher
    from politerm.store.models import TaskState

    board = make_board(redis_server)
    board.publish("a", {}, role="router", every=60, asks={"T-old": {"question": "stale?"}})
    with RunStore.open(tmp_path / "store.db") as store:
        store.create_task("T-1", "make hello", max_rounds=3)
        store.update_task("T-1", state=TaskState.WAITING_USER, question="Which greeting?")
        store.set_meta("asker:T-1", "PLANNER")
        node = BoardPublisher(store, board, "a", [], "s-node", every=60)
        router = BoardPublisher(store, board, "a", [], "s", role="router", every=60, tasks=True)
        assert await node.changed() == {} and node.changed_asks() == {}  # a node's: none
        stop = asyncio.Event()
        async with BoardFeed(board, every=60) as feed:
            running = asyncio.create_task(router.run(stop))
            try:
                # Its first publish names all its questions: the one of its last run goes.

                async def only_t1() -> bool:
                    await asyncio.sleep(0)
                    return [a["task"] for a in feed.asked()] == ["T-1"]

                await aretry_until(only_t1, 10, what="T-1 on the board and T-old gone")
                (asked,) = feed.asked()
                assert (asked["node"], asked["agent"], asked["question"]) == (
                    "a",
                    "PLANNER",
                    "Which greeting?",
                )
                store.update_task("T-1", state=TaskState.PLANNING, clear=["question"])

                async def none_asked() -> bool:
                    await asyncio.sleep(0)
                    return not feed.asked()

                await aretry_until(none_asked, 10, what="T-1 answered, gone from the board")
            finally:
                stop.set()
                await asyncio.wait_for(running, 10)
