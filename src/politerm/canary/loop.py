"""The canary's loop checks: the Planner⇄Executer loop on one CLI, under ``ask`` + patterns.

Both seats run the CLI (aider's planner with ``--no-pretty``, whose replies keep the tags),
started by the loop's own session (``poli up``) in a scratch project, and two tasks run
through the router in a row (:func:`~politerm.engine.loop.run_task`):

- **tall loop**: the executer runs a command taller than the screen (an 80-line heredoc;
  for aider, which runs a reply's lines one by one, 60 ``echo`` lines), which the run's
  approval patterns match only when read whole, from the pane's history;
- **two tasks**: a second task whose command prints output, so aider asks its follow-up
  "Add command output to the chat?" after running it.

The run's policy is ``approval = "ask"`` with patterns for exactly those commands, and
nobody answers: a question that reaches a person (a command not read whole, a follow-up
question left to the user) fails the check at once, saying what was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import secrets
import typing as t

from politerm.canary.recipes import Options, prepare
from politerm.canary.result import CheckResult
from politerm.errors import PolitermError

if t.TYPE_CHECKING:
    from politerm.canary.install import InstalledCli
    from politerm.store.models import Event
    from politerm.testing.mockllm import MockLLM, Rule

LOOP_CHECKS = ("tall loop", "two tasks")
# The profile of each seat, and arguments the executer adds (aider runs a reply's bash
# blocks only with the diff edit format; its planner keeps tags with --no-pretty).
_PLANNER_PROFILE = {"aider": "aider-raw"}
_EXECUTER_PROFILE = {"aider": "aider"}
_EXECUTER_ARGS = {"aider": ["--edit-format", "diff"]}
# The task id and nonce the loop's prompts carry, for the scripted answers.
_IDS = r"(?=.*?TASK_ID=(?P<id>[^\s()]+))(?=.*?\(nonce=(?P<nonce>[0-9a-f]+)\))"
TALL_LINES = 80
SHORT = "echo canary-two | tee two.txt; sleep 1"
SHORT_PATTERN = r"^echo canary-two \| tee two\.txt; sleep 1$"


def tall_command(cli: str) -> tuple[str, str, list[str]]:
    r"""The tall command for ``cli``, the pattern matching it whole, and the file it writes.

    Examples
    --------
    >>> command, pattern, lines = tall_command("claude")
    >>> import re; bool(re.search(pattern, command)), len(lines)
    (True, 80)
    >>> bool(re.search(pattern, command.split("\n", 1)[1]))
    False
    """
    if cli == "aider":
        lines = [f"line {i}" for i in range(1, 61)]
        command = "\n".join(f"echo {ln} >> tall.txt" for ln in lines)
        return command, r"\A(?:echo line \d+ >> tall\.txt\n)+echo line 60 >> tall\.txt\Z", lines
    lines = [f"line {i} of the tall file" for i in range(1, TALL_LINES + 1)]
    command = "\n".join(["cat > tall.txt <<'EOF'", *lines, "EOF"])
    return command, r"\Acat > tall\.txt <<'EOF'\n(?:line \d+ of the tall file\n)+EOF\Z", lines


def _block(to: str, typ: str, tag: str, body: str) -> str:
    header = f'{{"to":"{to}","type":"{typ}","id":"{{id}}","nonce":"{{nonce}}"}}'
    return f"```\n[[POLI:MSG {header}]]\n<{tag}>\n{body}\n</{tag}>\n[[/POLI:MSG]]\n```\n"


def _prompt(*markers: str) -> str:
    return "".join(f"(?=.*?{m})" for m in markers) + _IDS


def _rules(cli: str) -> list[Rule]:
    from politerm.testing.mockllm import Rule

    tall, _, _ = tall_command(cli)
    rules = [Rule(_prompt("EXECUTER replied:"), "All good.\n\n" + _block(
        "USER", "final", "REPORT", "Done: the canary task ran."), name="loop-final")]  # fmt: skip
    for step, command in (("LOOP-ONE", tall), ("LOOP-TWO", SHORT)):
        result = "Finished.\n\n" + _block("PLANNER", "result", "RESULT", f"Ran {step}.")
        match = _prompt("You received a PLANNER plan block:", step)
        if cli == "aider":  # no tool protocol: the bash block and the result in one reply
            reply = f"Running it.\n\n```bash\n{command}\n```\n\n{result}"
            run = Rule(match, reply, name=f"{step}-run")
        else:
            run = Rule(match, "Running it.", command=command, after=result, escalate=True,
                       name=f"{step}-run")  # fmt: skip
        plan = _block("EXECUTER", "plan", "PLAN", f"1. Run the {step} command.\n2. Report back.")
        rules += [run, Rule(_prompt("User request:", step), f"The plan.\n\n{plan}",
                            name=f"{step}-plan")]  # fmt: skip
    return rules


def _config_text(
    cli: str, binary: pathlib.Path, llm: MockLLM, root: pathlib.Path, socket: str
) -> str:
    _, tall_pattern, _ = tall_command(cli)
    patterns = json.dumps([tall_pattern, SHORT_PATTERN])
    text = (
        f'[tmux]\nsocket = "{socket}"\nsession = "canary-loop"\nwidth = 200\nheight = 50\n\n'
        '[store]\npath = "runs.sqlite3"\n\n'
        "[timeouts]\nplan = 240\nexec = 240\nready = 120\n\n"
        f'[routing]\napproval = "ask"\napproval_patterns = {patterns}\n\n'
    )
    for name, profiles in (("PLANNER", _PLANNER_PROFILE), ("EXECUTER", _EXECUTER_PROFILE)):
        base = root / name.lower()
        spec = prepare(cli, binary, llm, base / "home", base / "work", Options(ask=True),
                       profiles.get(cli))  # fmt: skip
        argv = [*spec.argv, *(_EXECUTER_ARGS.get(cli, []) if name == "EXECUTER" else [])]
        text += (
            f"[agents.{name}]\ncommand = {json.dumps(argv)}\nprofile = {json.dumps(spec.profile)}\n"
            f"cwd = {json.dumps(str(spec.workdir))}\nprimer = false\n[agents.{name}.env]\n"
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.env.items())
            + "\n"
        )
    return text


@dataclasses.dataclass
class _Watch:
    """The task's events as they come: the first question asked of a person ends the wait."""

    asked: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    question: str = ""
    lines: list[str] = dataclasses.field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.lines.append(f"{event.kind}: {event.detail}"[:200])
        if event.kind == "approval-asked" and not self.asked.is_set():
            self.question = event.detail
            self.asked.set()


async def run_loop_checks(
    installed: InstalledCli,
    llm: MockLLM,
    *,
    timeout: float = 300.0,
    say: t.Callable[[str], None] | None = None,
) -> list[CheckResult]:
    """Run the loop checks on one installed CLI; never raises for a CLI that misbehaves."""
    import tempfile

    from politerm.config import load_config
    from politerm.engine.session import Session
    from politerm.messaging.routing import run_task
    from politerm.store import RunStore
    from politerm.store.models import TaskState

    say = say or (lambda _line: None)
    cli = installed.cli
    results: list[CheckResult] = []
    llm.add(*_rules(cli))
    with tempfile.TemporaryDirectory(prefix=f"poli-canary-loop-{cli}-") as scratch:
        root = pathlib.Path(scratch)
        socket = f"poli-canary-loop-{os.getpid()}-{secrets.token_hex(3)}"
        (root / "poli.toml").write_text(_config_text(cli, installed.binary, llm, root, socket))
        config = load_config(root, env={})
        wanted = ("PLANNER", "EXECUTER")
        config = config.model_copy(
            update={"agents": {n: a for n, a in config.agents.items() if n in wanted}}
        )
        store = RunStore.open(config.store.resolved_path())
        session = Session(config, store)
        work = root / "executer" / "work"

        def record(name: str, ok: bool, detail: str, screen: t.Sequence[str] = ()) -> bool:
            results.append(CheckResult(name, ok, detail[:300], () if ok else tuple(screen)))
            say(f"{cli} {installed.version}: {name}: {'ok' if ok else 'FAILED'}: {detail[:300]}")
            return ok

        try:
            try:
                await session.up(primers=False)
            except PolitermError as exc:
                lines = str(exc).splitlines()
                record(LOOP_CHECKS[0], False, f"not started: {lines[0]}", lines[1:][-10:])
                return results
            for name, step, check in (
                (LOOP_CHECKS[0], "LOOP-ONE", _tall_written),
                (LOOP_CHECKS[1], "LOOP-TWO", _two_written),
            ):
                watch = _Watch()
                request = f"Run the canary command. {step}"
                task = asyncio.create_task(
                    run_task(config, store, request, printer=watch, timeout=timeout)
                )
                asked = asyncio.create_task(watch.asked.wait())
                await asyncio.wait({task, asked}, return_when=asyncio.FIRST_COMPLETED)
                asked.cancel()
                if watch.asked.is_set() and not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, PolitermError):
                        await task
                    record(name, False, f"a person was asked: {watch.question}", watch.lines[-10:])
                    return results
                try:
                    done = await task
                except PolitermError as exc:
                    record(name, False, str(exc), watch.lines[-10:])
                    return results
                written = check(cli, work)
                ok = done.state is TaskState.DONE and not written
                why = f"task {done.state.value}" + (f": {done.error}" if done.error else "")
                why += f"; {written}" if written else ""
                if not record(name, ok, why, watch.lines[-10:]):
                    return results
        finally:
            with contextlib.suppress(Exception):
                await session.down()
            with contextlib.suppress(Exception):
                await session.host.server.kill_server()
            await session.host.close()
            store.close()
    return results


def _tall_written(cli: str, work: pathlib.Path) -> str:
    """What is wrong with the tall command's file ("" when it holds every line)."""
    _, _, lines = tall_command(cli)
    path = work / "tall.txt"
    if not path.is_file():
        return "tall.txt was not written"
    got = path.read_text().splitlines()
    return "" if got == lines else f"tall.txt holds {len(got)} of {len(lines)} lines"


def _two_written(_cli: str, work: pathlib.Path) -> str:
    path = work / "two.txt"
    if not path.is_file():
        return "two.txt was not written"
    return "" if path.read_text().strip() == "canary-two" else "two.txt holds something else"
