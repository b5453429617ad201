"""The queue file: one locked atomic read-modify-write, corrupt files repaired, reports."""

from __future__ import annotations

import json
import multiprocessing
import typing as t

import pytest

from politerm.bridge.queue import QueueRepair, TaskQueue, find
from politerm.bridge.report import report_task
from politerm.errors import BridgeTaskInvalid

if t.TYPE_CHECKING:
    import pathlib

PER_WRITER = 40


def task(task_id: str) -> dict[str, t.Any]:
    return {
        "task_id": task_id,
        "instruction_details": {"commands_to_execute": [{"command_id": "c", "command": "true"}]},
    }


def _writer(path: str, name: str, start: t.Any) -> None:
    import pathlib

    start.wait()
    q = TaskQueue(pathlib.Path(path))
    for i in range(PER_WRITER):
        q.submit([task(f"{name}-{i}")])
        # Also rewrite someone else's task now and then: a read-modify-write that must not
        # lose the submissions happening meanwhile.
        with q.update() as tasks:
            if tasks:
                tasks[0][f"touched_by_{name}"] = i


def test_three_processes_writing_at_once_lose_no_task(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "q" / "task_queue.json"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(path), n, start)) for n in ("a", "b", "c")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    tasks = TaskQueue(path).read()
    ids = [x["task_id"] for x in tasks]
    assert len(ids) == len(set(ids)) == 3 * PER_WRITER
    assert set(ids) == {f"{n}-{i}" for n in "abc" for i in range(PER_WRITER)}
    first = tasks[0]
    assert {"touched_by_a", "touched_by_b", "touched_by_c"} <= set(first)
    assert json.loads(path.read_text())["tasks"] == tasks
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list(path.parent.glob(".*.tmp"))


def test_submit_refuses_duplicates_and_non_objects_and_adds_nothing(tmp_path: pathlib.Path) -> None:
    q = TaskQueue(tmp_path / "task_queue.json")
    assert q.submit([task("a")]) == ["a"]
    with pytest.raises(BridgeTaskInvalid, match="task a: a task with this task_id is already"):
        q.submit([task("b"), task("a")])
    with pytest.raises(BridgeTaskInvalid, match="task #1: task_id is missing"):
        q.submit([{"instruction_details": {}}])
    with pytest.raises(BridgeTaskInvalid, match="task #2: a task must be a JSON object"):
        q.submit([task("c"), "x"])  # type: ignore[list-item]
    assert [x["task_id"] for x in q.read()] == ["a"]
    assert q.read()[0]["status"] == "pending"


def test_a_corrupt_queue_is_backed_up_reported_and_its_whole_tasks_recovered(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "task_queue.json"
    q = TaskQueue(path)
    q.submit([task("keep1"), task("keep2"), task("torn")])
    whole = path.read_text()
    torn = whole[: whole.index('"torn"') + 20]  # cut in the middle of the third task
    path.write_text(torn)
    seen: list[QueueRepair] = []
    q2 = TaskQueue(path, on_repair=seen.append)
    assert [x["task_id"] for x in q2.read()] == ["keep1", "keep2"]
    assert len(seen) == 1
    repair = seen[0]
    assert repair.recovered == ("keep1", "keep2")
    assert repair.backup.read_text() == torn  # nothing is silently dropped
    assert repair.backup.stat().st_mode & 0o777 == 0o600
    assert "corrupt" in repair.describe()
    assert str(repair.backup) in repair.describe()
    # The repaired file is a valid queue again; no second repair.
    q2.submit([task("new")])
    assert [x["task_id"] for x in q2.read()] == ["keep1", "keep2", "new"]
    assert len(seen) == 1


@pytest.mark.parametrize(
    "text",
    ["not json at all", '{"tasks": 5}', "[1, 2]", '{"tasks": [{"task_id": "x"}'],
    ids=["garbage", "tasks-not-list", "list-of-numbers", "unterminated"],
)
def test_every_kind_of_corruption_is_repaired(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "task_queue.json"
    path.write_text(text)
    seen: list[QueueRepair] = []
    tasks = TaskQueue(path, on_repair=seen.append).read()
    assert len(seen) == 1
    assert seen[0].backup.read_text() == text
    assert all(isinstance(x, dict) for x in tasks)
    json.loads(path.read_text())


def test_report_moves_only_a_handed_over_task_and_is_idempotent(tmp_path: pathlib.Path) -> None:
    q = TaskQueue(tmp_path / "task_queue.json")
    q.submit([task("t")])
    with pytest.raises(BridgeTaskInvalid, match="cannot go from pending to completed_by_agent"):
        report_task(q, "t", "completed_by_agent")
    with q.update() as tasks:
        tasks[0]["status"] = "pending_agent_action"
    with pytest.raises(BridgeTaskInvalid, match="not 'completed'"):
        report_task(q, "t", "completed")
    assert report_task(q, "t", "processing_by_agent")  # the original's optional "started"
    assert not report_task(q, "t", "processing_by_agent")
    with pytest.raises(BridgeTaskInvalid, match="task nope: not in"):
        report_task(q, "nope", "failed_by_agent")
    secret = "sk-ant-api03-" + "x" * 40
    assert report_task(q, "t", "failed_by_agent", message="tried", error=f"bad {secret}")
    assert not report_task(q, "t", "failed_by_agent")
    with pytest.raises(BridgeTaskInvalid, match="from failed_by_agent to processing_by_agent"):
        report_task(q, "t", "processing_by_agent")
    raw = find(q.read(), "t")
    assert raw is not None
    assert raw["status"] == "failed_by_agent"
    assert raw["result"]["message"] == "tried"
    assert secret not in json.dumps(raw)
