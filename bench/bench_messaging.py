"""Messaging benchmark: a request from ``poli send`` to the worker's submitted prompt.

ours
    ``Messenger.send`` (body file, request file, store row) and the postman on the agent
    driver: wait until the receiver is idle, DELIVERING, paste, confirm the submit,
    DELIVERED. Latency = the fake agent's ``prompt`` log time minus the time ``send`` began.
baseline
    The original protocol by hand, measured on the same server in the same run: write the
    request file, then one ``tmux load-buffer`` + ``paste-buffer`` + ``send-keys Enter``
    process each (no store, no idle check, no confirmation). Same latency definition.
raw response line
    A worker's ``[RESPONSE from=%N] <path>`` pasted by hand into the orchestrator's pane,
    until the postman recorded the request RESPONDED (no baseline: the original protocol has
    nothing that records it).

Run ``python -m bench.bench_messaging [--quick]``. Ratios are ``baseline / ours``: above 1
means politerm is faster; below 1 is the price of durability and confirmation.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import typing as t

from bench._common import SESSION, Row, Stats, check, print_table, private_server, ratio
from politerm.config import load_config
from politerm.driver import Host
from politerm.messaging.postman import Postman
from politerm.messaging.protocol import response_line
from politerm.messaging.service import Identity, Messenger
from politerm.store import RunStore
from politerm.store.mail import MailState
from politerm.testing.fakeagent import read_log
from politerm.testing.retry import aretry_until
from politerm.tmux.server import TmuxServer

if t.TYPE_CHECKING:
    import pathlib

    from bench._common import Bench
    from politerm.tmux.pane import Pane


# Between two requests, in both runs: longer than the postman's turn-end settle (0.3 s).
_PAUSE = 0.6


def _prompt_times(log: pathlib.Path, marker: str) -> list[float]:
    return [
        float(e["ts"])
        for e in read_log(log)
        if e.get("event") == "prompt" and marker in str(e.get("text", ""))
    ]


async def _idle(bench: Bench, pane: Pane, log: pathlib.Path, replies: int) -> None:
    async def done() -> bool:
        return sum(1 for e in read_log(log) if e.get("event") == "reply") >= replies

    await aretry_until(done, 30, what="the worker's reply")
    del bench, pane


def _by_hand(bench: Bench, path: pathlib.Path, pane_id: str) -> None:
    for args in (
        ("load-buffer", "-b", "b", str(path)),
        ("paste-buffer", "-p", "-d", "-b", "b", "-t", pane_id),
        ("send-keys", "-t", pane_id, "Enter"),
    ):
        subprocess.run(bench.tmux_argv(*args), check=True, capture_output=True, timeout=10)


async def _baseline(bench: Bench, n: int) -> list[float]:
    pane = await bench.fake_agent("claude", "base")
    log = bench.log_path("base")
    out: list[float] = []
    for i in range(n):
        marker = f"BASE-{i}-"
        path = bench.workdir / f"base-{i}.request"
        start = time.time()
        path.write_text(f"[WORKER capability=WRITABLE to={pane.pane_id}]\n{marker} hello\n")
        await asyncio.to_thread(_by_hand, bench, path, pane.pane_id)

        async def seen(marker: str = marker) -> list[float]:
            return _prompt_times(log, marker)

        out.append(((await aretry_until(seen, 30, what="the baseline prompt"))[0] - start) * 1000)
        await _idle(bench, pane, log, i + 1)
        await asyncio.sleep(_PAUSE)
    return out


async def _ours(bench: Bench, n: int) -> tuple[list[float], list[float]]:
    cfg = bench.workdir / "poli.toml"
    cfg.write_text(
        f'[tmux]\nsocket = "{bench.socket}"\nsession = "{SESSION}"\n'
        f'[store]\npath = "{bench.workdir / "runs.sqlite3"}"\n'
    )
    config = load_config(bench.workdir, config_path=cfg, env={})
    store = RunStore.open(config.store.resolved_path())
    m = Messenger(config, store)
    worker = await bench.fake_agent("claude", "w1")
    orch = await bench.fake_agent("claude", "orch")
    for name, pane in (("W1", worker), ("ORCH", orch)):
        store.upsert_agent(
            name,
            session=SESSION,
            pane_id=pane.pane_id,
            command="fake",
            cwd=str(bench.workdir),
            profile="fake-claude",
            resume_command=None,
        )
    server = TmuxServer(bench.socket, config_dir=bench.server.config_dir)
    postman = Postman(m, Host(server, "bench"), settle=0.3)
    task = asyncio.ensure_future(postman.run())
    log = bench.log_path("w1")
    deliver: list[float] = []
    answer: list[float] = []
    try:
        for i in range(n):
            start = time.time()
            mail = m.send(f"hello {i}", to="W1", sender=Identity("ORCH", orch.pane_id))

            async def seen(mail_id: str = mail.id) -> list[float]:
                check(not task.done(), "the postman stopped")
                return _prompt_times(log, f"Message {mail_id} ")

            deliver.append(((await aretry_until(seen, 30, what="our prompt"))[0] - start) * 1000)
            await _idle(bench, worker, log, i + 1)

            async def state(mail_id: str = mail.id) -> bool:
                return m.mailbox.require(mail_id).state is MailState.DELIVERED

            await aretry_until(state, 30, what="DELIVERED")
            answer_file = m.dir.write(f"{mail.id}.response", b"done")
            line = response_line(worker.pane_id, str(answer_file))
            begin = time.time()
            await orch.paste(line.encode())

            async def responded(mail_id: str = mail.id) -> float | None:
                got = m.mailbox.require(mail_id)
                return got.responded if got.state is MailState.RESPONDED else None

            stamp = await aretry_until(responded, 30, what="RESPONDED")
            answer.append((stamp - begin) * 1000)
            await orch.send_keys("C-u")  # empty the orchestrator's box for the next line
            # the postman follows a turn until the worker stayed ready for ``settle``; a
            # request sent earlier waits that long (measured apart: this is "to an idle worker")
            await asyncio.sleep(_PAUSE)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        store.close()
    return deliver, answer


async def _run(n: int) -> list[Row]:
    async with private_server("messaging") as bench:
        base = await _baseline(bench, n)
        ours, answers = await _ours(bench, n)
    b, o, a = Stats.of(base), Stats.of(ours), Stats.of(answers)
    return [
        {
            "measure": "send → worker's prompt (ms)",
            "n": o.n,
            "ours p50": o.p50,
            "ours p99": o.p99,
            "baseline p50": b.p50,
            "baseline p99": b.p99,
            "ratio p50": ratio(b.p50, o.p50),
        },
        {
            "measure": "raw response line → RESPONDED (ms)",
            "n": a.n,
            "ours p50": a.p50,
            "ours p99": a.p99,
            "baseline p50": "-",
            "baseline p99": "-",
            "ratio p50": "-",
        },
    ]


def main(quick: bool = False) -> list[Row]:
    """Run the benchmark and print its table."""
    return print_table(
        "messaging: delivery to an idle worker", asyncio.run(_run(5 if quick else 20))
    )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
