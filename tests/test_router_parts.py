"""The router's parts as objects over a real store, without tmux: its clock and its endings.

``Router`` is composed of its parts (:mod:`politerm.engine.routebase`, deadlines, sending,
effects); with no agents attached they run against a real SQLite store alone, each called
through its own interface at the times the test chooses.
"""

from __future__ import annotations

import pathlib
import time
import typing as t

from politerm.config import Config, StoreConfig, TmuxConfig
from politerm.engine.decide import PLANNER
from politerm.engine.loop import submit
from politerm.engine.routebase import Routing
from politerm.engine.router import Router
from politerm.store import RunStore
from politerm.store.models import MessageState, TaskState

if t.TYPE_CHECKING:
    from politerm.store.models import Message, Task


def _config(tmp_path: pathlib.Path) -> Config:
    return Config(
        tmux=TmuxConfig(socket=f"poli-absent-{tmp_path.name}", session="t"),
        store=StoreConfig(path=tmp_path / "runs.sqlite3"),
    )


def _started(config: Config, store: RunStore, task_id: str) -> tuple[Router, Task, Message]:
    """A router with no agents, and a task it started: its prompt to the planner queued."""
    router = Router(Routing(config, store, {}))
    task = submit(store, config, "do it", task_id=task_id)
    router.executor.start_task(task)
    (prompt,) = store.list_messages(task_id=task.id)
    return router, task, prompt


def _kinds(store: RunStore, task_id: str) -> list[str]:
    return [m.type for m in store.list_messages(task_id=task_id)]


def test_a_steps_clock_waits_for_delivery_then_nudges_retries_and_times_out(
    tmp_path: pathlib.Path,
) -> None:
    config = _config(tmp_path)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        router, task, prompt = _started(config, store, "T-clock")
        assert (prompt.recipient, prompt.type, prompt.state) == (
            PLANNER,
            "task",
            MessageState.QUEUED,
        )
        plan = config.timeouts.plan
        now = time.time()
        # Its prompt is not delivered: however late, the step's clock has not started.
        router.deadlines.check(now + 10 * plan)
        assert _kinds(store, task.id) == ["task"]
        store.transition(prompt.id, MessageState.DELIVERING, turn_nonce="n1", text="do it")
        store.transition(prompt.id, MessageState.DELIVERED)
        router.executor.restart_clock(task.id, PLANNER, now)
        router.deadlines.check(now + plan * config.timeouts.nudge_fraction)
        assert _kinds(store, task.id) == ["task", "nudge"]
        router.deadlines.check(now + plan)
        assert _kinds(store, task.id) == ["task", "nudge", "retry"]
        router.deadlines.check(now + plan + 1)  # the retry gave the step a new deadline
        assert store.get_task(task.id).state is TaskState.PLANNING  # type: ignore[union-attr]
        router.deadlines.check(now + 2 * plan)
        final = store.get_task(task.id)
        assert final is not None and final.state is TaskState.FAILED
        assert f"PLANNER sent no plan block for task {task.id} in the plan step" in (
            final.error or ""
        )
        assert "nudge queued, not delivered; retry queued, not delivered" in (final.error or "")
        # The task's queued follow-ups died with it; nothing is left to send.
        assert store.next_queued(PLANNER) is None
        assert store.get_expectation(task.id) is None


def test_a_failed_task_ends_its_turns_and_a_second_failure_changes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    config = _config(tmp_path)
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        router, task, prompt = _started(config, store, "T-end")
        store.start_turn(PLANNER, nonce="n1", task_id=task.id, message_id=prompt.id, start_line=0)
        router.executor.fail(task.id, "first")
        router.executor.fail(task.id, "second")
        final = store.get_task(task.id)
        assert final is not None and (final.state, final.error) == (TaskState.FAILED, "first")
        assert store.current_turn(PLANNER) is None
        assert store.get_message(prompt.id).state is MessageState.DEAD  # type: ignore[union-attr]
