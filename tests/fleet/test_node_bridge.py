"""A bridge task for an agent on another node: typed by that node, answered back (issue 22).

Real redis-server, real ``poli`` processes per node (each its own HOME, tmux server and
store), the fake agents' own logs as the ground truth.
"""

from __future__ import annotations

import json
import os
import signal
import typing as t

import pytest

from politerm.testing.retry import retry_until
from tests.fleet.nodes import make_fleet, slow_executer, tear_down
from tests.loophelpers import EXECUTER_OK

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow

DONE = """
[[POLI:MSG {"to":"BRIDGE","type":"done","id":"{id}","nonce":"{nonce}"}]]
tidied the notes
[[/POLI:MSG]]
"""
BRIDGE_RULE = f"""
[[rules]]
match = '(?s)BRIDGE TASK (?P<id>note) \\(nonce (?P<nonce>[0-9a-f]+)\\).*Follow this instruction'
reply = '''{DONE}'''
"""
TASK = {"task_id": "note", "instruction_details": {"instruction": "Tidy the notes."}}


def test_a_bridge_task_for_the_executer_on_b_is_typed_there_once_and_completed_on_a(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=EXECUTER_OK + BRIDGE_RULE)
    a, b = nodes["a"], nodes["b"]
    try:
        b.start_node()
        (a.root / "t.json").write_text(json.dumps(TASK))
        sub = a.poli("bridge", "submit", "t.json")
        assert sub.returncode == 0, sub.stderr
        done = a.poli("bridge", "start", "--once", "--executor", "agent:EXECUTER")
        assert done.returncode == 0, done.stdout + done.stderr + b.log()
        assert done.stdout.strip() == "note completed"
        # Typed once into b's EXECUTER (its own log), none started on a.
        handed = [p for p in b.prompts("EXECUTER") if p.startswith("BRIDGE TASK note")]
        assert len(handed) == 1
        assert a.prompts("EXECUTER") == []
        with b.store() as store:
            (row,) = store.journal_leased()
        assert (row.node, row.verdict) == ("b", "accepted")
        assert row.work is not None and row.work.startswith("bridge-note-")
        shown = a.poli("bridge", "show", "note")
        assert "tidied the notes" in shown.stdout, shown.stdout
    finally:
        tear_down(nodes)


def test_the_bridge_killed_mid_turn_takes_up_the_same_work_and_the_task_is_typed_once(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    slow = slow_executer(6) + BRIDGE_RULE
    nodes = make_fleet(tmp_path, redis_server, ["a", "b"], executer=slow)
    a, b = nodes["a"], nodes["b"]
    try:
        b.start_node()
        (a.root / "t.json").write_text(json.dumps(TASK))
        assert a.poli("bridge", "submit", "t.json").returncode == 0
        bridge = a.start("bridge", "start", "--once", "--executor", "agent:EXECUTER")

        def handed() -> list[str]:
            return [p for p in b.prompts("EXECUTER") if p.startswith("BRIDGE TASK note")]

        retry_until(handed, 90, what="b's EXECUTER to be handed the bridge task")
        os.kill(bridge.pid, signal.SIGKILL)  # mid-turn: EXECUTER thinks for 6 s
        bridge.communicate(timeout=30)
        again = a.poli("bridge", "start", "--once", "--executor", "agent:EXECUTER")
        assert again.returncode == 0, again.stdout + again.stderr + b.log()
        assert again.stdout.strip() == "note completed"
        # The restarted bridge posted the same work: typed once, one lease, accepted.
        assert len(handed()) == 1
        with b.store() as store:
            (row,) = store.journal_leased()
        assert row.verdict == "accepted"
    finally:
        tear_down(nodes)
