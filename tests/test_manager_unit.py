"""Manager mode's pure parts and its store: the state machine (every transition), brain
replies, prompts and the overview, projects and turns persisted (redacted, private)."""

from __future__ import annotations

import pathlib
import re
import stat
import typing as t

import pytest

from politerm.errors import BrainReplyError, ManagerProjectError, ManagerStateError
from politerm.manager.prompt import Limits, planning_prompt, project_overview
from politerm.manager.reply import ReplyKind, parse_reply
from politerm.manager.states import TRANSITIONS, ManagerState, check_transition
from politerm.manager.store import ManagerStore, Role, TaskStatus
from politerm.store import RunStore

S = ManagerState
KEY = "sk-ant-api03-" + "x7Yz9AbCdEfGhIjKlMnOpQrStUvWx" + "-Zz"


# --- state machine ----------------------------------------------------------------------

ALL_PAIRS = [(a, b) for a in ManagerState for b in ManagerState]


@pytest.mark.parametrize(("a", "b"), ALL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in ALL_PAIRS])
def test_every_transition_is_allowed_exactly_when_the_table_says(
    a: ManagerState, b: ManagerState
) -> None:
    if b in TRANSITIONS[a]:
        assert check_transition(a, b) is b
    else:
        with pytest.raises(ManagerStateError, match=f"from {a.value} to {b.value}"):
            check_transition(a, b)


def test_every_state_is_reachable_and_every_task_state_can_be_left() -> None:
    reachable = {S.IDLE}
    frontier = [S.IDLE]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in reachable:
                reachable.add(nxt)
                frontier.append(nxt)
    assert reachable == set(ManagerState)
    for state in ManagerState:
        if state.in_task or state is S.PAUSED_WAITING_USER_INPUT:
            assert S.PROJECT_SELECTED in TRANSITIONS[state], state  # stop
            assert S.PAUSED_WAITING_USER_INPUT in TRANSITIONS[state] or not state.in_task
    assert {s for s in ManagerState if s.is_error} == {
        S.ERROR_PROJECT,
        S.ERROR_BRAIN,
        S.ERROR_BRAIN_REPLY,
        S.ERROR_SYSTEM,
        S.ERROR_DEV_AGENT,
    }


def test_unknown_state_names_are_refused() -> None:
    with pytest.raises(ManagerStateError, match="unknown manager state"):
        check_transition("idle", "dancing")


# --- replies ----------------------------------------------------------------------------


class ReplyCase(t.NamedTuple):
    test_id: str
    raw: str
    kind: ReplyKind | None  # None: malformed
    text: str = ""


REPLY_CASES = [
    ReplyCase("instruction", "Create hello.py printing hi.", ReplyKind.INSTRUCTION,
              "Create hello.py printing hi."),
    ReplyCase("question", "NEED_USER_INPUT: Which port?", ReplyKind.NEED_USER_INPUT,
              "Which port?"),
    ReplyCase("question-after-whitespace", "\n   NEED_USER_INPUT:  Which port?\n",
              ReplyKind.NEED_USER_INPUT, "Which port?"),
    ReplyCase("complete-no-colon", "TASK_COMPLETE all tests pass", ReplyKind.TASK_COMPLETE,
              "all tests pass"),
    ReplyCase("complete-colon", "TASK_COMPLETE: done", ReplyKind.TASK_COMPLETE, "done"),
    ReplyCase("complete-bare", "TASK_COMPLETE", ReplyKind.TASK_COMPLETE, ""),
    ReplyCase("system-error", "SYSTEM_ERROR: the repo is gone", ReplyKind.SYSTEM_ERROR,
              "the repo is gone"),
    ReplyCase("marker-mid-text", "Run the tests; if green say TASK_COMPLETE",
              ReplyKind.INSTRUCTION, "Run the tests; if green say TASK_COMPLETE"),
    ReplyCase("marker-on-second-line", "Fix it.\nTASK_COMPLETE", ReplyKind.INSTRUCTION,
              "Fix it.\nTASK_COMPLETE"),
    ReplyCase("marker-glued", "NEED_USER_INPUTS please", ReplyKind.INSTRUCTION,
              "NEED_USER_INPUTS please"),
    ReplyCase("lowercase-marker", "task_complete yes", ReplyKind.INSTRUCTION,
              "task_complete yes"),
    ReplyCase("control-sequences-removed", "\x1b[2J\x1b]0;x\x07Do it\x07", ReplyKind.INSTRUCTION,
              "Do it"),
    ReplyCase("empty", "", None),
    ReplyCase("whitespace", " \n\t ", None),
    ReplyCase("only-escapes", "\x1b[31m\x1b[0m", None),
    ReplyCase("question-without-question", "NEED_USER_INPUT:", None),
    ReplyCase("error-without-reason", "SYSTEM_ERROR", None),
]  # fmt: skip


@pytest.mark.parametrize("case", REPLY_CASES, ids=[c.test_id for c in REPLY_CASES])
def test_brain_replies(case: ReplyCase) -> None:
    if case.kind is None:
        with pytest.raises(BrainReplyError):
            parse_reply(case.raw)
        return
    reply = parse_reply(case.raw)
    assert (reply.kind, reply.text) == (case.kind, case.text)


# --- prompts ----------------------------------------------------------------------------


def test_overview_is_bounded_and_skips_noise(tmp_path: pathlib.Path) -> None:
    (tmp_path / "README.md").write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "src").mkdir()
    for i in range(30):
        (tmp_path / "src" / f"m{i:02}.py").write_text("x" * i)
    for noise in (".git", "node_modules", "dev_logs", ".venv"):
        (tmp_path / noise).mkdir()
        (tmp_path / noise / "junk.txt").write_text("junk")
    text = project_overview(tmp_path, Limits(overview_files=10, readme_lines=5))
    assert "Files (31):" in text
    assert "- src/m00.py (0 bytes)" in text
    assert "… and 21 more files" in text
    assert "junk" not in text
    assert "line 4" in text and "line 5" not in text
    assert "README.md (first 5 lines):" in text


def test_planning_prompt_holds_every_part_in_order() -> None:
    from politerm.manager.store import Turn

    turns = [Turn(1, "p", "t", 1, "manager", "Create x", False, 0.0)]
    text = planning_prompt(
        overall_goal="A shop",
        task_goal="Add a cart",
        overview="Root: /p",
        summary="Earlier: auth done",
        turns=turns,
        latest_report="cart.py created",
        limits=Limits(report_chars=5),
    )
    order = ["A shop", "Add a cart", "Root: /p", "Earlier: auth done", "Create x", "cart."]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions)
    assert "[… 10 more characters]" in text
    second = planning_prompt(
        overall_goal="", task_goal="g", overview=None, summary="", turns=[], latest_report=None
    )
    assert "Project overview" not in second and "(none yet)" in second


# --- store ------------------------------------------------------------------------------


@pytest.fixture
def mstore(tmp_path: pathlib.Path) -> t.Iterator[ManagerStore]:
    with RunStore.open(tmp_path / "state" / "runs.sqlite3") as store:
        yield ManagerStore(store)


def test_projects_persist_with_state_history_and_counters(
    tmp_path: pathlib.Path, mstore: ManagerStore
) -> None:
    project_dir = tmp_path / "proj"
    project_dir.mkdir()
    p = mstore.add_project("shop", project_dir, goal="A shop", channel="file")
    assert (p.state, p.channel, p.path) == (S.IDLE, "file", str(project_dir))
    mstore.transition("shop", S.LOADING_PROJECT)
    mstore.transition("shop", S.PROJECT_SELECTED)
    mstore.select("shop")
    p = mstore.start_task("shop", "Add a cart")
    assert p.state is S.CALLING_BRAIN and p.task_status == TaskStatus.RUNNING.value
    mstore.transition("shop", S.WAITING_DEV_REPORT, step=1, last_instruction="Create cart.py")
    mstore.add_turn("shop", Role.MANAGER, "Create cart.py")
    with pytest.raises(ManagerStateError):
        mstore.transition("shop", S.TASK_COMPLETE)
    path = mstore.store.path
    mstore.store.close()
    with RunStore.open(path) as again:
        s2 = ManagerStore(again)
        p = s2.project("shop")
        assert (p.state, p.step, p.turn_count, p.last_instruction) == (
            S.WAITING_DEV_REPORT, 1, 1, "Create cart.py",
        )  # fmt: skip
        assert p.resumable and s2.selected() == p
        assert [tt.text for tt in s2.turns("shop")] == ["Create cart.py"]
        moves = [e.data["to"] for e in again.list_events() if e.kind == "manager.state"]
        assert moves == [
            "loading_project",
            "project_selected",
            "calling_brain",
            "waiting_dev_report",
        ]


def test_bad_projects_say_what_is_wrong(tmp_path: pathlib.Path, mstore: ManagerStore) -> None:
    with pytest.raises(ManagerProjectError, match="is not a directory"):
        mstore.add_project("x", tmp_path / "missing")
    with pytest.raises(ManagerProjectError, match="project name 'a b'"):
        mstore.add_project("a b", tmp_path)
    with pytest.raises(ManagerProjectError, match="channel must be"):
        mstore.add_project("x", tmp_path, channel="fax")
    mstore.add_project("x", tmp_path)
    with pytest.raises(ManagerProjectError, match="already exists"):
        mstore.add_project("x", tmp_path)
    with pytest.raises(ManagerProjectError, match="no manager project 'y'; known: x"):
        mstore.project("y")


def test_secrets_never_reach_the_store_or_audit(
    tmp_path: pathlib.Path, mstore: ManagerStore
) -> None:
    mstore.add_project("p", tmp_path, goal=f"deploy with {KEY}")
    mstore.transition("p", S.LOADING_PROJECT)
    mstore.transition("p", S.PROJECT_SELECTED)
    mstore.start_task("p", f"use password={KEY}")
    mstore.add_turn("p", Role.DEV, f"my key is {KEY}")
    mstore.fold_summary("p", f"summary {KEY}", [])
    mstore.transition("p", S.ERROR_BRAIN, detail=f"failed {KEY}", error=f"err {KEY}")
    mstore.store.close()
    state_dir = mstore.store.path.parent
    for f in state_dir.iterdir():
        assert KEY.encode() not in f.read_bytes(), f
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700


def test_summarization_triggers_on_turns_or_tokens() -> None:
    from politerm.config.manager import ManagerConfig
    from politerm.manager.engine import needs_summary
    from politerm.manager.store import Turn

    def turns(n: int, size: int) -> list[Turn]:
        return [Turn(i, "p", "t", i, "dev", "x" * size, False, 0.0) for i in range(n)]

    def needs(config: ManagerConfig, live: list[Turn]) -> bool:
        return needs_summary(config, live)

    by_turns = ManagerConfig(summarize_after_turns=4, keep_recent_turns=1)
    assert not needs(by_turns, turns(4, 10))
    assert needs(by_turns, turns(5, 10))
    by_tokens = ManagerConfig(summarize_after_turns=100, summarize_tokens=100, keep_recent_turns=1)
    assert not needs(by_tokens, turns(2, 200))  # 100 tokens: at the budget
    assert needs(by_tokens, turns(2, 204))
    keep_all = ManagerConfig(summarize_after_turns=2, keep_recent_turns=3)
    assert not needs(keep_all, turns(3, 10_000))  # nothing older than the kept turns


def test_one_project_is_driven_by_one_manager_at_a_time(tmp_path: pathlib.Path) -> None:
    import os
    import stat as st

    from politerm.errors import ManagerError
    from politerm.manager.app import ProjectLock

    store = tmp_path / "state" / "runs.sqlite3"
    with ProjectLock(store, "shop") as first:
        assert first.held
        with pytest.raises(
            ManagerError, match=f"driven by another poli manager \\(pid {os.getpid()}\\)"
        ):
            ProjectLock(store, "shop").take()
        with ProjectLock(store, "other"):
            pass  # another project is free
    assert not first.held
    with ProjectLock(store, "shop"):
        pass  # released with its holder
    assert st.S_IMODE((store.parent / "manager-shop.lock").stat().st_mode) == 0o600


# --- the docs ---------------------------------------------------------------------------

DOC = pathlib.Path(__file__).parents[1] / "docs" / "manager.md"


def test_the_docs_table_names_every_manager_key_with_its_default() -> None:
    from politerm.config.manager import BrainSettings, ManagerConfig

    text = DOC.read_text()
    table = text.split("Every key of `[manager]`", 1)[1].split("\n\n", 2)[1]
    documented: dict[str, str] = {}
    for row in table.splitlines()[2:]:
        keys, default = (cell.strip() for cell in row.strip("|").split("|")[:2])
        names = re.findall(r"`([a-z_.]+)`", keys)
        values = [v.strip(" `") for v in default.split(",")] if default else []
        for i, name in enumerate(names):
            documented[name] = values[i] if len(values) == len(names) else ""
    fields = {f"brain.{k}": v for k, v in BrainSettings.model_fields.items()}
    fields |= {k: v for k, v in ManagerConfig.model_fields.items() if k != "brain"}
    assert set(documented) == set(fields)
    for name, shown in documented.items():
        default = fields[name].default
        if isinstance(default, int | float) and not isinstance(default, bool):
            assert float(shown) == default, name
        elif isinstance(default, str) and default and shown not in ("", "provider's"):
            assert shown == default, name


def test_every_scripted_command_in_the_docs_parses() -> None:
    import shlex

    from click.testing import CliRunner

    from politerm.cli import cli

    block = DOC.read_text().split("### 3. Or script it", 1)[1].split("```")[1]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.startswith("poli ")]
    assert len(lines) == 6
    for line in lines:
        # --help is eager: it ends the command once every documented option was accepted
        done = CliRunner().invoke(cli, [*shlex.split(line)[1:], "--help"])
        assert done.exit_code == 0, f"{line}: {done.output}"


def test_the_docs_list_every_console_command() -> None:
    from politerm.manager.repl import COMMANDS, HELP

    rows = re.findall(r"^\| `([a-z]+)", DOC.read_text(), re.MULTILINE)
    assert set(COMMANDS) <= set(rows)
    for sub in ("add", "list", "select"):
        assert f"| `project {sub}" in DOC.read_text() and f"project {sub}" in HELP
