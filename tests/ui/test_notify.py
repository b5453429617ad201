"""Notifications: webhook, ntfy topics and the real notify-send, fed by another process's events."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import typing as t

import pytest
from aiohttp import web

from politerm.config import NotifyConfig
from politerm.store import RunStore
from politerm.ui.notify import Notifier
from tests.ui.notifybus import desktop

if t.TYPE_CHECKING:
    import pathlib


class Receiver:
    """A loopback HTTP server recording every POST (the webhook and the ntfy server)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.arrived = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.posts.append((request.path, dict(request.headers), await request.read()))
        self.arrived.set()
        return web.json_response({"ok": True})

    async def __aenter__(self) -> t.Self:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def wait_for(self, n: int, timeout: float = 15) -> None:
        async with asyncio.timeout(timeout):
            while len(self.posts) < n:
                self.arrived.clear()
                await self.arrived.wait()


async def test_events_from_another_process_reach_every_channel_rate_limited(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite3"
    async with Receiver() as rx, desktop(monkeypatch) as bus:
        base = f"http://127.0.0.1:{rx.port}"
        config = NotifyConfig(
            desktop=True, webhook=f"{base}/hook", ntfy=[f"{base}/poli-topic"],
            min_interval=3600, burst=10,
        )  # fmt: skip
        with RunStore.open(path) as mine, RunStore.open(path) as other:
            other.add_event("done", task_id="T-old", detail="before the notifier started")
            notifier = Notifier(config, mine, link="http://127.0.0.1:8765/")
            async with notifier.running():
                other.add_event(
                    "approval-asked",
                    agent="EXECUTER",
                    detail="EXECUTER asks: Bash(echo hi) token=sk-ant-abcdefghijklmnopqrstuvwxyz",
                )
                await rx.wait_for(2)
                # the same agent asking again within min_interval is not sent again
                other.add_event("approval-asked", agent="EXECUTER", detail="again")
                other.add_event("failed", task_id="T1", detail="EXECUTER exited")
                other.add_event("done", task_id="T2", detail="made hello")
                await rx.wait_for(6)
            assert [n.kind for n in notifier.sent] == ["approval", "failed", "done"]
            assert notifier.limit.suppressed == 1
            assert notifier.errors == []
    hooks = [json.loads(body) for p, _, body in rx.posts if p == "/hook"]
    assert [h["kind"] for h in hooks] == ["approval", "failed", "done"]
    assert hooks[0]["agent"] == "EXECUTER" and hooks[0]["link"] == "http://127.0.0.1:8765/"
    assert "sk-ant-" not in hooks[0]["body"] and "[REDACTED" in hooks[0]["body"]
    topics = [(h, body.decode()) for p, h, body in rx.posts if p == "/poli-topic"]
    assert [h["Tags"] for h, _ in topics] == ["approval", "failed", "done"]
    assert topics[0][0]["Title"] == "poli: approval needed (EXECUTER)"
    assert topics[0][0]["Click"] == "http://127.0.0.1:8765/"
    assert "sk-ant-" not in topics[0][1]
    # The real notify-send delivered each notice over the session bus, one call each: the
    # suppressed approval never reached the server, nor the event from before the start.
    shown = bus.received
    assert [(n.app_name, n.summary, n.urgency) for n in shown] == [
        ("politerm", "poli: approval needed (EXECUTER)", "critical"),
        ("politerm", "poli: task failed (T1)", "critical"),
        ("politerm", "poli: task done (T2)", "normal"),
    ]
    assert [n.body for n in shown] == [f"{h['body']}\nhttp://127.0.0.1:8765/" for h in hooks]
    assert "sk-ant-" not in shown[0].body and "[REDACTED" in shown[0].body
    assert shown[2].body == "made hello\nhttp://127.0.0.1:8765/"


async def test_a_private_ntfy_topic_gets_the_token_from_the_environment_only(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_NTFY", "tk_secretsecretsecret")
    async with Receiver() as rx:
        base = f"http://127.0.0.1:{rx.port}"
        config = NotifyConfig(
            desktop=False, webhook=f"{base}/hook", ntfy=[f"{base}/private"],
            ntfy_token_env="MY_NTFY",
        )  # fmt: skip
        with RunStore.open(tmp_path / "runs.sqlite3") as store:
            notifier = Notifier(config, store, link="https://127.0.0.2:8443/")
            notifier.skip_past()
            store.add_event("stuck", agent="PLANNER", detail="PLANNER is stuck")
            assert [n.kind for n in await notifier.check()] == ["stuck"]
    by_path = {path: (headers, body) for path, headers, body in rx.posts}
    assert by_path["/private"][0]["Authorization"] == "Bearer tk_secretsecretsecret"
    assert by_path["/private"][0]["Click"] == "https://127.0.0.2:8443/"
    # the webhook is another party: it gets neither the header nor the token
    assert "Authorization" not in by_path["/hook"][0]
    assert b"tk_secret" not in by_path["/hook"][1]


async def test_a_refusing_channel_is_reported_not_raised(tmp_path: pathlib.Path) -> None:
    async with Receiver() as rx:
        rx_port = rx.port
    # the receiver is gone: the webhook cannot be reached
    config = NotifyConfig(desktop=False, webhook=f"http://127.0.0.1:{rx_port}/hook?secret=1")
    with RunStore.open(tmp_path / "runs.sqlite3") as store:
        notifier = Notifier(config, store)
        notifier.skip_past()
        store.add_event("stuck", agent="PLANNER", detail="PLANNER is stuck (rate limit)")
        sent = await notifier.check()
    assert [n.kind for n in sent] == ["stuck"]
    assert len(notifier.errors) == 1
    assert notifier.errors[0].startswith(f"notification to http://127.0.0.1:{rx_port}/hook failed")
    assert "secret" not in notifier.errors[0]


async def test_poli_notify_sends_what_another_process_records(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Receiver() as rx, desktop(monkeypatch) as bus:
        (tmp_path / "poli.toml").write_text(
            '[store]\npath = "runs.sqlite3"\n\n'
            f'[notify]\ndesktop = true\nwebhook = "http://127.0.0.1:{rx.port}/hook"\n'
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "politerm", "notify", "--link", "http://127.0.0.1:9/",
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line.decode().startswith("poli notify: following the run store"), line
            with RunStore.open(tmp_path / "runs.sqlite3") as store:
                store.add_event("gate", agent="step-2", detail="Step 2 done. Continue?")
                await rx.wait_for(1)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
    [(_, _, body)] = rx.posts
    notice = json.loads(body)
    assert notice["kind"] == "gate" and notice["title"] == "poli: gate waiting (step-2)"
    assert notice["link"] == "http://127.0.0.1:9/"
    [shown] = bus.received
    assert (shown.app_name, shown.summary, shown.urgency) == (
        "politerm", "poli: gate waiting (step-2)", "critical",
    )  # fmt: skip
    assert shown.body == "Step 2 done. Continue?\nhttp://127.0.0.1:9/"


async def test_every_kind_the_workflows_record_is_told_and_the_chosen_kinds_only(
    tmp_path: pathlib.Path,
) -> None:
    from politerm.pipeline.state import RunRecord, RunState

    async with Receiver() as rx:
        config = NotifyConfig(
            desktop=False, webhook=f"http://127.0.0.1:{rx.port}/hook", min_interval=3600,
            burst=50, events=["approval", "question", "gate", "done", "failed", "stuck",
                              "limited"],
        )  # fmt: skip
        with RunStore.open(tmp_path / "runs.sqlite3") as store:
            record = RunRecord(
                run_id="r1", pipeline="feature", pipeline_name="feature", project=str(tmp_path),
                task="build it", session="poli-p-r1", socket="none", cli="fake",
            )  # fmt: skip
            record.step(2)
            run = RunState(store, record)
            notifier = Notifier(config, store, link="http://127.0.0.1:8765/")
            notifier.skip_past()
            # Each event as the workflow that records it writes it.
            store.add_event("approval-asked", agent="EXECUTER", detail="EXECUTER asks to run ls")
            store.add_event(
                "block", task_id="T1", agent="PLANNER", detail="PLANNER → USER: question",
                data={"type": "question", "to": "USER", "body": "Which colour?"},
            )  # fmt: skip
            store.add_event("block", task_id="T1", agent="PLANNER", data={"type": "plan"})
            run.ask(2, "gate", "Step 2 is done. Continue to step 3?")
            store.add_event("done", task_id="T1", agent="EXECUTER", detail="made hello")
            store.add_event("failed", task_id="T2", detail="round limit reached")
            run.event("pipeline.done", "pipeline feature finished (run r1)")
            run.event("pipeline.failed", "pipeline stopped: step 2 failed", step=2)
            store.add_event("stuck", agent="PLANNER", detail="PLANNER is stuck (spinner)")
            store.add_event("limited", agent="PLANNER", detail="PLANNER hit a limit")
            store.add_event("tokens", agent="PLANNER", detail="1,234 tokens")
            sent = await notifier.check()
            expected = ["approval", "question", "gate", "done", "failed", "done", "failed",
                        "stuck", "limited"]  # fmt: skip
            assert [n.kind for n in sent] == expected
            await rx.wait_for(len(expected))
            hooks = [json.loads(body) for _, _, body in rx.posts]
            assert [h["kind"] for h in hooks] == expected
            assert all(h["link"] == "http://127.0.0.1:8765/" for h in hooks)
            assert hooks[1]["body"] == "Which colour?"
            assert hooks[2]["title"] == "poli: gate waiting (step-2)"
            assert hooks[2]["body"] == "Step 2 is done. Continue to step 3?"
            assert hooks[7]["title"] == "poli: agent STUCK (PLANNER)"
            assert hooks[8]["title"] == "poli: agent LIMITED (PLANNER)"
            # [notify] events chooses: without "done", a task done is not told
            quiet = Notifier(config.model_copy(update={"events": ["failed"]}), store)
            quiet.skip_past()
            store.add_event("done", task_id="T3", agent="EXECUTER", detail="done")
            store.add_event("failed", task_id="T4", detail="exited")
            assert [n.kind for n in await quiet.check()] == ["failed"]


async def test_poli_web_notifies_with_a_link_to_its_page(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.ui.uihelpers import base_and_token, web

    async with Receiver() as rx, desktop(monkeypatch) as bus:
        (tmp_path / "poli.toml").write_text(
            '[tmux]\nsocket = "poli-web-none"\n\n[store]\npath = "runs.sqlite3"\n\n'
            f'[notify]\ndesktop = true\nwebhook = "http://127.0.0.1:{rx.port}/hook"\n'
        )
        with web(tmp_path) as url:
            base, token = base_and_token(url)
            with RunStore.open(tmp_path / "runs.sqlite3") as store:
                store.add_event("stuck", agent="PLANNER", detail="PLANNER is stuck")
                await rx.wait_for(1)
    [(_, _, body)] = rx.posts
    notice = json.loads(body)
    assert notice["kind"] == "stuck" and notice["link"] == base + "/"
    assert token not in body.decode()
    # poli web's own notify-send reached the desktop's server with the same link
    [shown] = bus.received
    assert (shown.app_name, shown.summary, shown.urgency) == (
        "politerm", "poli: agent STUCK (PLANNER)", "critical",
    )  # fmt: skip
    assert shown.body == f"PLANNER is stuck\n{base}/"
    assert token not in shown.body


async def test_no_desktop_bus_is_said_once_then_quiet(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A machine without a desktop: no session bus, no X display, an empty runtime directory.
    for name in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    async with Receiver() as rx:
        config = NotifyConfig(
            desktop=True, webhook=f"http://127.0.0.1:{rx.port}/hook", min_interval=3600, burst=10
        )
        with RunStore.open(tmp_path / "runs.sqlite3") as store:
            notifier = Notifier(config, store)
            notifier.skip_past()
            for agent in ("PLANNER", "EXECUTER", "REVIEWER"):
                store.add_event("stuck", agent=agent, detail=f"{agent} is stuck")
            sent = await notifier.check()
            store.add_event("done", task_id="T1", detail="T1 done")
            sent += await notifier.check()
        # every notice still went out on the other channel
        assert len(sent) == len(rx.posts) == 4
    # the real notify-send failed once; it was said once and not tried again
    assert len(notifier.errors) == 1, notifier.errors
    assert notifier.errors[0].startswith("desktop notifications are off: no desktop session bus")
    warned = [r for r in caplog.records if r.name == "politerm.ui.notify"]
    assert [r.getMessage() for r in warned] == notifier.errors
