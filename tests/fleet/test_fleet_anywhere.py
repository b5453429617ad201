"""What a person or an agent does on any node reaches the fleet (issue 22).

A task's question answered on a node that hosts no agent and runs no router reaches the
asking agent on the router's node; MCP ``list_agents`` lists the whole fleet; an agent that
exits between turns on its node shows as exited on every node. Real redis-server, real
``poli`` processes per node (each its own HOME, tmux server and store), the fake agents,
whose own logs are the ground truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import typing as t

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from politerm.testing.retry import retry_until
from tests.fleet.nodes import FleetNode, make_fleet, tear_down
from tests.loophelpers import FINAL, PLAN, PLANNER_HEAD, block, rule
from tests.messaging.test_mcp import call
from tests.ui.uihelpers import base_and_token, web

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow

QUESTION = "Which greeting should I use?"
ASKS = (
    PLANNER_HEAD
    + rule(r"\A\s*EXECUTER replied:", FINAL)
    + rule(r"\AThe user answered", PLAN)
    + rule(r"\A(?=TASK_ID=)", block("USER", "question", QUESTION, tag="QUESTION"))
)
"""PLANNER asks the user a question before it plans."""
ANSWERED = "The user answered your question:\nUse 'hello'."


def _status(node: FleetNode) -> dict[str, t.Any]:
    shown = node.poli("status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    data: dict[str, t.Any] = json.loads(shown.stdout)
    return data


def _task(node: FleetNode, task_id: str) -> dict[str, t.Any]:
    return next(tk for tk in _status(node)["tasks"] if tk["id"] == task_id)


@pytest.mark.timeout(300)  # three machines' processes, and a web server, on 2 shared cores
def test_a_tasks_question_answered_on_a_node_without_agents_reaches_the_planner(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    nodes = make_fleet(tmp_path, redis_server, ["a", "b", "c"], planner=ASKS)
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    try:
        b.start_node()
        assert a.poli("up").returncode == 0
        asked = a.poli("task", "make hello", "--id", "T-q", "--timeout", "90")
        assert asked.returncode == 3, asked.stdout + asked.stderr + b.log()
        assert QUESTION in _task(a, "T-q")["question"]
        # c hosts no agent and runs no router: its store has no task T-q.
        with web(c.root, "--allow-actions", env=c.env) as url:
            base, token = base_and_token(url)
            # A view's answer names the question it showed: another one is refused (409).
            stale = httpx.post(
                base + "/api/answer",
                headers={"X-Poli-Token": token},
                json={"task": "T-q", "question": "Which colour?", "text": "vermilion"},
                timeout=60,
            )
        assert stale.status_code == 409, stale.text
        assert "now asks" in stale.json()["error"] and "node a" in stale.json()["error"]
        said = c.poli("answer", "T-q", "Use 'hello'.")
        assert said.returncode == 0, said.stdout + said.stderr
        assert said.stdout.strip() == "answered task T-q (on node a)"
        # The ground truth first (PLANNER's own log: EXECUTER's result reached it), then
        # a's store: the task is done.
        retry_until(
            lambda: any(p.startswith("EXECUTER replied:") for p in a.prompts("PLANNER")),
            90,
            what="EXECUTER's result to reach PLANNER on a",
        )
        retry_until(lambda: _task(a, "T-q")["state"] == "done", 60, what="T-q to be done")
        # The ground truth: PLANNER on a was handed the answer once, and only that one.
        answers = [p for p in a.prompts("PLANNER") if p.startswith("The user answered")]
        assert len(answers) == 1 and answers[0].startswith(ANSWERED + "\n"), answers
        assert not any("vermilion" in p for p in a.prompts("PLANNER"))
        assert len(b.prompts("EXECUTER")) == 1
        # A task that waits for no answer, or that no router knows: one line each.
        for task_id, words in (
            ("T-q", "task T-q is done, not waiting for an answer"),
            ("T-nope", "no task 'T-nope'"),
        ):
            again = c.poli("answer", task_id, "again")
            assert again.returncode == 1, again.stdout + again.stderr
            assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
            assert words in again.stderr and "node a" in again.stderr, again.stderr
        assert len([p for p in a.prompts("PLANNER") if p.startswith("The user answered")]) == 1
    finally:
        tear_down(nodes)


def _agent_pids(node: FleetNode) -> dict[str, int]:
    """Agent name → the pid of its pane's process, on ``node``'s tmux server."""
    out = subprocess.run(
        ["tmux", "-L", node.socket, "list-panes", "-a", "-F", "#{pane_pid} #{@poli_agent}"],
        env=node.env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    found = (line.partition(" ") for line in out.splitlines())
    return {name: int(pid) for pid, _, name in found if name}


@contextlib.contextmanager
def _after_a_task(
    tmp_path: pathlib.Path, redis_server: RedisServer, names: t.Sequence[str]
) -> t.Iterator[dict[str, FleetNode]]:
    """PLANNER on a (its router), EXECUTER on b (its node), once task T-1 is done."""
    nodes = make_fleet(tmp_path, redis_server, names)
    try:
        nodes["b"].start_node()
        assert nodes["a"].poli("up").returncode == 0
        done = nodes["a"].poli("task", "make hello", "--id", "T-1", "--timeout", "90")
        assert done.returncode == 0, done.stdout + done.stderr + nodes["b"].log()
        yield nodes
    finally:
        tear_down(nodes)


def test_an_agent_that_exits_between_turns_shows_as_exited_on_other_nodes(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    with _after_a_task(tmp_path, redis_server, ["a", "b"]) as nodes:
        a, b = nodes["a"], nodes["b"]

        def executer_state() -> str:
            shown = next(x for x in _status(a)["agents"] if x["name"] == "EXECUTER")
            return str(shown["state"])

        retry_until(lambda: executer_state() == "ready", 60, interval=0.3, what="EXECUTER ready")
        pid = _agent_pids(b)["EXECUTER"]
        os.killpg(os.getpgid(pid), signal.SIGKILL)  # between turns: no turn looks at it
        retry_until(
            lambda: executer_state() == "exited",
            60,
            interval=0.3,
            what="b's EXECUTER to show as exited in a's status",
        )
        assert b.proc is not None and b.proc.poll() is None  # its node lives on


def test_mcp_list_agents_lists_the_whole_fleet_with_each_agents_node(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    with _after_a_task(tmp_path, redis_server, ["a", "b", "c"]) as nodes:
        # PLANNER on a asks: itself from a's store (its pane), EXECUTER from b's rows.
        on_a = {x["name"]: x for x in asyncio.run(_list_agents(nodes["a"], "PLANNER"))}
        assert on_a.keys() == {"PLANNER", "EXECUTER"}, on_a
        assert (on_a["PLANNER"]["node"], on_a["PLANNER"]["you"]) == ("a", True)
        assert on_a["PLANNER"]["pane"] and on_a["PLANNER"]["state"] == "ready"
        assert (on_a["EXECUTER"]["node"], on_a["EXECUTER"]["pane"]) == ("b", None)
        assert on_a["EXECUTER"]["state"] == "ready" and not on_a["EXECUTER"]["you"]
        # On c, which hosts nothing: both from the board.
        on_c = {x["name"]: x["node"] for x in asyncio.run(_list_agents(nodes["c"], "ORCH"))}
        assert on_c == {"PLANNER": "a", "EXECUTER": "b"}


async def _list_agents(node: FleetNode, agent: str) -> list[dict[str, t.Any]]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "politerm", "mcp"],
        env={**node.env, "POLI_AGENT": agent, "POLI_CONFIG": str(node.root / "poli.toml")},
        cwd=node.root,
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed: list[dict[str, t.Any]] = await call(session, "list_agents")
        return listed
