"""The fake agent's seeded fault knobs ([faults]) in a real tmux pane, read from its own log."""

from __future__ import annotations

import json
import typing as t

import pytest

from politerm.testing.fakeagent import ScenarioError, load_scenario, prompts, read_log
from politerm.testing.retry import retry_until
from tests.fakeagent_helpers import FakePane

if t.TYPE_CHECKING:
    import pathlib

    from libtmux.server import Server

READY = "? for shortcuts"


@pytest.fixture
def workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def _scenario(tmp_path: pathlib.Path, faults: str, head: str = "think_time = 0.1\n") -> str:
    path = tmp_path / "faults.toml"
    path.write_text(f"{head}\n[faults]\nseed = 7\n{faults}", "utf-8")
    return str(path)


def _faults(agent: FakePane, kind: str) -> list[dict[str, t.Any]]:
    return [e for e in agent.events("fault") if e["kind"] == kind]


def test_lost_enters_are_logged_and_a_later_enter_submits(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    agent = FakePane(server, workdir, "claude", scenario=_scenario(tmp_path, "lose_enter = 0.5\n"))
    agent.wait_ready()
    agent.paste(b"keep pressing")
    agent.wait_screen("keep pressing")

    def submitted() -> bool:
        agent.keys("Enter")
        return bool(agent.events("prompt"))

    retry_until(submitted, 60, interval=0.2, what="an Enter that is not lost")
    lost = agent.events("swallowed_enter")
    assert lost, "seed 7 at 50 % loses the first Enter"
    assert {e["reason"] for e in lost} == {"fault"}
    assert prompts(agent.log) == [b"keep pressing"]


def test_every_enter_lost_at_share_one(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    agent = FakePane(server, workdir, "claude", scenario=_scenario(tmp_path, "lose_enter = 1.0\n"))
    agent.wait_ready()
    agent.paste(b"never sent")
    agent.wait_screen("never sent")
    for count in (1, 2, 3):
        agent.keys("Enter")
        agent.wait_event("swallowed_enter", count=count)
    assert agent.events("prompt") == []
    assert "never sent" in agent.screen()


def test_crash_after_submit_happens_once_over_restarts(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = _scenario(tmp_path, 'crash_at = "after_submit"\ncrash_share = 1.0\n')
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"first")
    agent.wait_screen("first")
    agent.keys("Enter")
    assert agent.wait_dead() == 3
    assert [e["event"] for e in agent.events()][-2:] == ["prompt", "fault"]
    assert _faults(agent, "crash")[0]["at"] == "after_submit"
    # Restarted on the same log (as `poli up --resume` does), it remembers its crash.
    again = FakePane(
        server, workdir, "claude", scenario=scenario, name="fa2", extra=["--log", str(agent.log)]
    )
    retry_until(
        lambda: sum(e["event"] == "start" for e in read_log(agent.log)) == 2, 10, what="restart"
    )
    again.wait_screen(READY, 10)
    again.paste(b"second")
    again.wait_screen("second")
    again.keys("Enter")
    retry_until(lambda: any(e["event"] == "reply" for e in read_log(agent.log)), 10, what="a reply")
    assert prompts(agent.log) == [b"first", b"second"]
    assert len(_faults(agent, "crash")) == 1
    assert again.dead_status() is None


def test_crash_before_submit_leaves_the_paste_unsubmitted(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = _scenario(tmp_path, 'crash_at = "before_submit"\ncrash_share = 1.0\n')
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"doomed")
    agent.wait_screen("doomed")
    agent.keys("Enter")
    assert agent.wait_dead() == 3
    assert agent.events("paste") and agent.events("prompt") == []
    assert _faults(agent, "crash")[0]["at"] == "before_submit"


def test_crash_mid_reply_draws_half_a_reply(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    head = 'think_time = 0.1\ndefault_reply = "line one\\nline two\\nline three\\nline four"\n'
    scenario = _scenario(tmp_path, 'crash_at = "mid_reply"\ncrash_share = 1.0\n', head)
    transcript = tmp_path / "transcript.jsonl"
    agent = FakePane(
        server, workdir, "claude", scenario=scenario, extra=["--transcript", str(transcript)]
    )
    agent.wait_ready()
    agent.paste(b"talk")
    agent.wait_screen("talk")
    agent.keys("Enter")
    assert agent.wait_dead(10) == 3
    screen = agent.screen(history=True)
    assert "line one" in screen and "line four" not in screen
    assert agent.events("reply") == []
    assert prompts(agent.log) == [b"talk"]
    # The reply never completed: the transcript holds the prompt and no answer.
    kinds = [json.loads(line)["type"] for line in transcript.read_text().splitlines()]
    assert kinds == ["user"]


def test_freeze_holds_input_until_it_ends(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = _scenario(tmp_path, "freeze_share = 1.0\nfreeze_seconds = 1.5\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"freeze now")
    agent.wait_screen("freeze now")
    agent.keys("Enter")
    (freeze,) = agent.wait_event("fault")
    agent.type("typed while frozen")
    (key,) = [e for e in agent.wait_event("key", 10, count=2) if e.get("key") == "text"]
    # The keys waited in the terminal: read only once the freeze was over.
    assert key["ts"] >= freeze["ts"] + freeze["seconds"]
    (reply,) = agent.wait_event("reply", 10)
    assert reply["ts"] >= freeze["ts"] + freeze["seconds"]


def test_slow_turn_thinks_longer(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    scenario = _scenario(tmp_path, "slow_share = 1.0\nslow_seconds = 1.2\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"slowly")
    agent.wait_screen("slowly")
    agent.keys("Enter")
    (reply,) = agent.wait_event("reply", 10)
    (slow,) = _faults(agent, "slow")
    (prompt,) = agent.events("prompt")
    assert slow["n"] == 1 and reply["ts"] - prompt["ts"] >= 0.1 + 1.2


@pytest.mark.parametrize(
    "keys",
    [("C-u",), ("C-a", "C-k"), ("Escape",), ("C-c",)],
    ids=["ctrl-u", "ctrl-a-ctrl-k", "esc", "ctrl-c"],
)
def test_text_left_in_the_box_and_cleared(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path, keys: tuple[str, ...]
) -> None:
    scenario = _scenario(tmp_path, "leave_text_share = 1.0\nleave_text = 'stray words'\n")
    agent = FakePane(server, workdir, "claude", scenario=scenario)
    agent.wait_ready()
    agent.paste(b"hello")
    agent.wait_screen("hello")
    agent.keys("Enter")
    agent.wait_screen("❯\u00a0stray words", 10)
    assert _faults(agent, "leave_text")[0]["text"] == "stray words"
    agent.keys(*keys)
    (cleared,) = agent.wait_event("cleared")
    assert cleared["text"] == "stray words" and cleared["key"] == keys[-1].lower().replace(
        "escape", "esc"
    ).replace("c-", "ctrl-")
    agent.wait_gone("stray words")
    agent.paste(b"clean")
    agent.wait_screen("clean")
    agent.keys("Enter")
    agent.wait_event("prompt", count=2)
    assert prompts(agent.log) == [b"hello", b"clean"]


def test_ctrl_k_without_ctrl_a_keeps_the_text(
    server: Server, workdir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    agent = FakePane(server, workdir, "claude", scenario=_scenario(tmp_path, ""))
    agent.wait_ready()
    agent.type("kept")
    agent.keys("C-k")
    agent.wait_event("key", count=2)
    agent.keys("Enter")
    agent.wait_event("prompt")
    assert agent.events("cleared") == [] and prompts(agent.log) == [b"kept"]


def test_bad_fault_knob_is_one_line_naming_the_key(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[faults]\nlose_enter = 2\n")
    with pytest.raises(ScenarioError, match=r"bad\.toml: key 'faults\.lose_enter'") as info:
        load_scenario(path)
    assert "\n" not in str(info.value)
