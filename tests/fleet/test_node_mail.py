"""Messages between agents across nodes: `poli send`/`reply` and MCP, typed by the node (#22).

Real redis-server, real ``poli`` processes per node (each its own HOME, tmux server and
store), the fake agents; what each agent was handed is read from its own log. Node a sends
(the project's service that ``poli send`` starts there, with no session up, carries the
message as fleet work); the node hosting EXECUTER types it under
the work's lease; ``poli reply`` on that node sends the answer back to a.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import typing as t

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from politerm.config import load_config
from politerm.engine import service
from politerm.engine.fleetlink import open_queue
from politerm.messaging.files import message_dir_for
from politerm.messaging.postman import PostmanLock
from politerm.testing.retry import retry_until
from tests.fleet.nodes import FleetNode, make_fleet, slow_executer, tear_down
from tests.fleet.test_redaction import SECRETS, everything_in
from tests.messaging.test_mcp import call

if t.TYPE_CHECKING:
    import pathlib

    from tests.fleet.redisserver import RedisServer

pytestmark = pytest.mark.slow

WAIT = 90.0


def handed(node: FleetNode, text: str) -> list[str]:
    """The prompts ``node``'s EXECUTER was handed that carry ``text`` (its own log)."""
    return [p for p in node.prompts("EXECUTER") if text in p]


def wait_handed(nodes: t.Iterable[FleetNode], text: str) -> FleetNode:
    """The first node whose EXECUTER was handed ``text``."""
    found: list[FleetNode] = []

    def look() -> bool:
        found[:] = [n for n in nodes if handed(n, text)]
        return bool(found)

    retry_until(look, WAIT, what=f"an EXECUTER to be handed {text!r}")
    return found[0]


def mail_id_in(prompt: str) -> str:
    found = re.search(r"Message (m-[0-9a-f]+) from ", prompt)
    assert found is not None, prompt
    return found.group(1)


def sent_to_b(
    a: FleetNode, b: FleetNode, text: str, *, seen: str | None = None
) -> tuple[subprocess.Popen[str], str, str]:
    """Start node b and ``poli send --wait`` ``text`` to EXECUTER from a; once b's EXECUTER
    was handed it (a prompt carrying ``seen``, default ``text``): the sender, that prompt
    and the message's id."""
    b.start_node()
    sent = a.start("send", "--to", "EXECUTER", "--wait", "--timeout", "120", text)
    wait_handed([b], seen or text)
    (prompt,) = handed(b, seen or text)
    return sent, prompt, mail_id_in(prompt)


def shown(node: FleetNode, mail_id: str) -> dict[str, t.Any]:
    """``poli msg show ID --json`` on ``node``."""
    out = node.poli("msg", "show", mail_id, "--json")
    assert out.returncode == 0, out.stderr
    found: dict[str, t.Any] = json.loads(out.stdout)
    return found


def wait_state(node: FleetNode, mail_id: str, state: str) -> dict[str, t.Any]:
    def look() -> dict[str, t.Any] | None:
        mail = shown(node, mail_id)
        return mail if mail["state"] == state else None

    return retry_until(look, WAIT, what=f"message {mail_id} {state} on node {node.name}")


def service_log(node: FleetNode) -> str:
    """What the project's service on ``node`` wrote (the sender's postman runs in it)."""
    config = load_config(node.root, env={})
    path = service.log_path(config)
    return path.read_text() if path.exists() else ""


# Node a's service, started as `poli send` starts it (with no session up: it delivers only).
_START = (
    "from politerm.config import load_config\n"
    "from politerm.engine import service\n"
    "service.start(load_config(env={}))\n"
)


@contextlib.contextmanager
def mail_fleet(
    tmp: pathlib.Path, redis: RedisServer, names: t.Sequence[str], **kwargs: t.Any
) -> t.Iterator[dict[str, FleetNode]]:
    """The fleet's nodes, node a's service running (``poli down`` on each stops it)."""
    nodes = make_fleet(tmp, redis, names, **kwargs)
    try:
        a = nodes["a"]
        argv = [sys.executable, "-c", _START]
        started = subprocess.run(
            argv, cwd=a.root, env=a.env, capture_output=True, text=True, check=False
        )
        assert started.returncode == 0, started.stderr
        # its child's postman runs before the test sends (a message's time to live is short)
        lock = PostmanLock(message_dir_for(load_config(a.root, env={})))
        retry_until(lock.holder, WAIT, what="a's postman")
        yield nodes
    finally:
        tear_down(nodes)


def test_poli_send_from_a_is_typed_once_on_b_and_the_reply_comes_back(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    with mail_fleet(tmp_path, redis_server, ["a", "b"]) as nodes:
        a, b = nodes["a"], nodes["b"]
        sent, prompt, mail_id = sent_to_b(a, b, "count the lines")
        # The sender's store says what the node reported: delivered on node b.
        mail = wait_state(a, mail_id, "delivered")
        assert "on node b" in mail["reason"], mail
        assert mail["recipient"] == "EXECUTER" and mail["attempts"] == 1
        # The request EXECUTER read names b's own message directory and `poli reply`.
        assert f"poli reply --to {mail_id}" in prompt
        # EXECUTER answers as in its pane on b (POLI_AGENT): its oldest delivered request.
        b.env["POLI_AGENT"] = "EXECUTER"
        said = b.poli("reply", "--no-postman", "there are 3 lines")
        assert said.returncode == 0, said.stderr
        out, err = sent.communicate(timeout=WAIT)
        assert sent.returncode == 0, out + err + service_log(a) + b.log()
        assert out.splitlines() == [mail_id, "there are 3 lines"]
        assert shown(a, mail_id)["state"] == "responded"
        assert shown(b, mail_id)["state"] == "responded"  # the copy on b
        # Typed exactly once, by b's node under a lease, recorded and accepted.
        assert handed(b, "count the lines") == [prompt]
        assert a.prompts("EXECUTER") == []
        with b.store() as store:
            (row,) = store.journal_leased()
        assert (row.agent, row.node, row.verdict) == ("EXECUTER", "b", "accepted")
        assert row.work == f"mail-{mail_id}-1"


def test_mcp_send_message_across_nodes_waits_for_the_answer_from_b(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    with mail_fleet(tmp_path, redis_server, ["a", "b"]) as nodes:
        a, b = nodes["a"], nodes["b"]
        b.start_node()
        got = asyncio.run(_send_by_mcp(a, b))
        assert (got["state"], got["response"]) == ("responded", "tidied")
        assert len(handed(b, "tidy the docs")) == 1
        assert "Message " + got["id"] + " from ORCH." in handed(b, "tidy the docs")[0]


async def _send_by_mcp(a: FleetNode, b: FleetNode) -> dict[str, t.Any]:
    """ORCH on node a calls MCP send_message to EXECUTER with wait; EXECUTER answers on b."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "politerm", "mcp"],
        env={**a.env, "POLI_AGENT": "ORCH", "POLI_CONFIG": str(a.root / "poli.toml")},
        cwd=a.root,
    )

    async def answer_on_b() -> None:
        found = await asyncio.to_thread(wait_handed, [b], "tidy the docs")
        mail_id = mail_id_in(handed(found, "tidy the docs")[0])
        said = await asyncio.to_thread(b.poli, "reply", "--no-postman", "--to", mail_id, "tidied")
        assert said.returncode == 0, said.stderr

    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=150) as session,
    ):
        await session.initialize()
        answering = asyncio.create_task(answer_on_b())
        got: dict[str, t.Any] = await call(
            session, "send_message", to="EXECUTER", text="tidy the docs", wait=True,
            timeout=WAIT,
        )  # fmt: skip
        await answering
        return got


def test_the_hosting_node_killed_mid_delivery_another_node_delivers_it_once_per_attempt(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    slow = slow_executer(6)
    with mail_fleet(
        tmp_path, redis_server, ["a", "b", "c"], executer_nodes=("b", "c"), executer=slow
    ) as nodes:
        a = nodes["a"]
        for name in ("b", "c"):
            nodes[name].start_node()
        sent = a.start("send", "--to", "EXECUTER", "--wait", "--timeout", "150", "sum the column")
        first = wait_handed([nodes["b"], nodes["c"]], "sum the column")
        first.kill_node()  # mid-delivery: its EXECUTER works on it, the lease not reported
        other = nodes["c"] if first is nodes["b"] else nodes["b"]
        wait_handed([other], "sum the column")
        mail_id = mail_id_in(handed(other, "sum the column")[0])
        mail = wait_state(a, mail_id, "delivered")
        assert f"on node {other.name}" in mail["reason"], mail
        said = other.poli("reply", "--no-postman", "--to", mail_id, "the sum is 12")
        assert said.returncode == 0, said.stderr
        # The dead node's agent answers too (it had the message): the first answer counts.
        late = first.poli("reply", "--no-postman", "--to", mail_id, "the sum is 12, again")
        assert late.returncode == 0, late.stderr
        out, err = sent.communicate(timeout=WAIT)
        assert sent.returncode == 0, out + err + service_log(a) + other.log()
        assert out.splitlines() == [mail_id, "the sum is 12"]
        # Once per attempt: one prompt on each node, one journal row each, in order.
        for node in (first, other):
            assert len(handed(node, "sum the column")) == 1, node.name
        with first.store() as store:
            (dead,) = store.journal_leased()
        with other.store() as store:
            (took,) = store.journal_leased()
        assert dead.work == took.work == f"mail-{mail_id}-1"
        assert dead.verdict is None and took.verdict == "accepted"
        assert took.epoch is not None and dead.epoch is not None and took.epoch > dead.epoch
        # Never two attempts live at once: the second began after the first lease ran out.
        assert dead.lease_until is not None and took.started >= dead.lease_until
        assert shown(a, mail_id)["attempts"] == 1  # one attempt of the sender's, two leases


def test_a_message_no_node_takes_is_a_dead_letter_after_its_time_to_live(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    ttl = "[routing]\nmessage_ttl = 3\n"
    with mail_fleet(tmp_path, redis_server, ["a"], extra=ttl) as nodes:
        a = nodes["a"]
        sent = a.poli("send", "--to", "EXECUTER", "--wait", "--timeout", "60", "anyone?")
        assert sent.returncode != 0
        # Posted, and no node held it when its time ran out: a dead letter saying so. (A
        # postman too slow to post it within its time expires it instead: said the same way.)
        assert "within its time to live" in sent.stderr, sent.stderr
        mail_id = re.search(r"message (m-[0-9a-f]+) is (dead|expired)", sent.stderr)
        assert mail_id is not None, sent.stderr
        assert shown(a, mail_id.group(1))["state"] in ("dead", "expired")


def test_a_secret_in_a_message_across_nodes_never_reaches_redis(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    every = " ".join(SECRETS.values())
    extra = '[redact]\npatterns = ["ACME-[0-9a-f]{10}"]\n'  # a project's own pattern
    with mail_fleet(tmp_path, redis_server, ["a", "b"], extra=extra) as nodes:
        a, b = nodes["a"], nodes["b"]
        sent, prompt, mail_id = sent_to_b(a, b, f"use {every}", seen="use ")
        said = b.poli("reply", "--no-postman", "--to", mail_id, f"used {every}")
        assert said.returncode == 0, said.stderr
        out, err = sent.communicate(timeout=WAIT)
        assert sent.returncode == 0, out + err + service_log(a)
        # What the agent on b got, and what came back to a, are redacted.
        assert "[REDACTED:github-token" in prompt and "[REDACTED:custom" in out
        config = load_config(a.root, env={"POLI_FLEET_NODE": "a"})
        stored = everything_in(open_queue(config))
        assert "[REDACTED:" in stored
        aof = b"".join(p.read_bytes() for p in redis_server.directory.rglob("*") if p.is_file())
        for name, secret in SECRETS.items():
            assert secret not in prompt and secret not in out, name
            assert secret not in stored, name
            assert secret.encode() not in aof, name
