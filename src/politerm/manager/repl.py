"""``poli manager``: the interactive console over the engine (prompt_toolkit).

The console reads commands while a task runs in the background (an asyncio task); the
engine's moves are printed above the prompt. Ctrl-C stops the current step (the dev agent is
interrupted and the task pauses for ``input``), never the program; ``stop`` ends the task,
``quit`` leaves it where it is, to be offered for resumption next time. Typed lines are kept
in a history file (0600) with secrets redacted.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import typing as t

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import DynamicCompleter, NestedCompleter, WordCompleter
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout

from politerm._internal.aio import finish
from politerm._internal.private import append_private
from politerm.errors import PolitermError
from politerm.manager.states import ManagerState

if t.TYPE_CHECKING:
    import pathlib

    from prompt_toolkit.completion import Completer

    from politerm.manager.app import ProjectLock
    from politerm.manager.engine import Manager
    from politerm.manager.store import Project
    from politerm.redact import Redactor

log = logging.getLogger(__name__)

HELP: t.Final = """\
project add NAME PATH [--goal TEXT] [--channel pane|file] [--agent PROFILE]
                      register a project (PATH: its directory)
project list          the projects and their states
project select NAME   work on NAME
goal TEXT             start a task toward TEXT on the selected project
input TEXT            answer the manager's question (or guide it after Ctrl-C)
status                where the selected project stands
stop                  stop the running task
quit                  leave (a running task stays resumable)
help                  this text
Ctrl-C stops the current step; Ctrl-D quits."""

COMMANDS: t.Final = ("project", "goal", "input", "status", "stop", "quit", "help")


class RedactingHistory(FileHistory):
    """prompt_toolkit's file history, private (0600) and with secrets redacted."""

    def __init__(self, path: pathlib.Path, redactor: Redactor) -> None:
        append_private(path, "")  # made 0600 before prompt_toolkit opens it
        self._redactor = redactor
        super().__init__(str(path))

    def store_string(self, string: str) -> None:
        """Append ``string``, redacted."""
        super().store_string(self._redactor.redact(string))


class Repl:
    """The console.

    Parameters
    ----------
    manager
        The engine.
    lock_for
        Builds the lock of a project (held while a task of it runs here).
    history
        Where typed lines are kept (``None``: in memory only).
    """

    def __init__(
        self,
        manager: Manager,
        lock_for: t.Callable[[str], ProjectLock],
        *,
        history: pathlib.Path | None = None,
    ) -> None:
        self.manager = manager
        self.store = manager.store
        self._lock_for = lock_for
        self._locks: dict[str, ProjectLock] = {}
        self._task: asyncio.Task[None] | None = None
        self._running: str | None = None
        hist = RedactingHistory(history, manager.store.redactor) if history else None
        self.session: PromptSession[str] = PromptSession(
            history=hist,
            completer=DynamicCompleter(self._completer),
            # Tab completes (a lone candidate at once), as in a shell; no menu while typing.
            complete_while_typing=False,
        )
        manager.on_event = self._on_event

    # --- output ---------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Print a line (above the prompt while one is shown)."""
        print(text, flush=True)

    def _on_event(self, project: Project, line: str) -> None:
        self.say(f"[{project.name}] {line}")

    def _completer(self) -> Completer:
        names = WordCompleter([p.name for p in self.store.list_projects()])
        project = {"add": None, "list": None, "select": names}
        return NestedCompleter.from_nested_dict(dict.fromkeys(COMMANDS) | {"project": project})

    def _prompt(self) -> str:
        selected = self.store.selected()
        where = selected.name if selected else "no project"
        return f"manager ({where})> "

    # --- main loop ------------------------------------------------------------------------

    async def run(self) -> int:
        """Read and run commands until ``quit`` or end of input; returns the exit code."""
        # Not raw: a control character in anything printed is shown, never obeyed.
        with patch_stdout():
            await self._offer_resume()
            while True:
                try:
                    line = await self.session.prompt_async(self._prompt)
                except KeyboardInterrupt:
                    await self._interrupt()
                    continue
                except EOFError:
                    break
                try:
                    if await self.execute(line) is False:
                        break
                except PolitermError as exc:
                    self.say(f"error: {exc}")
            await self._leave()
        return 0

    async def execute(self, line: str) -> bool:
        """Run one command line; False means quit."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            self.say(f"error: {exc}")
            return True
        if not words:
            return True
        cmd, args = words[0].lower(), words[1:]
        if cmd in ("quit", "exit"):
            return False
        handler = getattr(self, f"_cmd_{cmd}", None) if cmd in COMMANDS else None
        if handler is None:
            self.say(f"unknown command {cmd!r}; type help")
            return True
        await handler(args)
        return True

    # --- tasks in the background ----------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A task runs in the background."""
        return self._task is not None and not self._task.done()

    def _hold(self, name: str) -> None:
        """Take the project's lock (before any state is written) unless held already."""
        lock = self._locks.get(name)
        if lock is None or not lock.held:
            self._locks[name] = self._lock_for(name).take()

    def _launch(self, name: str) -> None:
        self._hold(name)
        self._running = name
        self._task = asyncio.create_task(self._drive(name))

    async def _drive(self, name: str) -> None:
        try:
            project = await self.manager.run(name)
        except PolitermError as exc:
            self.say(f"[{name}] error: {exc}")
            return
        except Exception as exc:  # a bug: say so instead of dying silently in the background
            log.exception("manager task of %s failed", name)
            self.say(f"[{name}] internal error: {type(exc).__name__}: {exc}")
            return
        if project.state is ManagerState.TASK_COMPLETE:
            self.say(f"[{name}] TASK COMPLETE: {project.result}")
        elif project.state is ManagerState.PAUSED_WAITING_USER_INPUT:
            self.say(f"[{name}] QUESTION: {project.question}\n(answer with: input TEXT)")
        elif project.state.is_error:
            self.say(f"[{name}] FAILED ({project.state.value}): {project.error}")

    async def _cancel(self) -> str | None:
        task, name = self._task, self._running
        self._task = self._running = None
        if task is None or task.done():
            return None
        await finish(task)
        return name

    async def _interrupt(self) -> None:
        name = await self._cancel()
        if name is None:
            self.say("(nothing running; type quit to leave)")
            return
        project = await self.manager.interrupt(name)
        self.say(f"[{name}] step stopped; {project.question}\n(answer with: input TEXT)")

    async def _leave(self) -> None:
        name = await self._cancel()
        if name is not None:
            state = self.store.project(name).state.value
            self.say(f"[{name}] task left in {state}; poli manager offers to resume it")
        for lock in self._locks.values():
            lock.release()
        await self.manager.aclose()

    async def _offer_resume(self) -> None:
        for project in self.store.list_projects():
            if not project.resumable:
                continue
            if project.state is ManagerState.PAUSED_WAITING_USER_INPUT:
                self.say(f"[{project.name}] waits for your input: {project.question}")
                continue
            if not project.state.in_task or self.busy:
                continue
            question = (
                f"Project {project.name} has a task under way ({project.state.value}, step "
                f"{project.step}): {project.task_goal}\nResume it? [Y/n] "
            )
            try:
                answer = (await self.session.prompt_async(question)).strip().lower()
            except (KeyboardInterrupt, EOFError):
                answer = "n"
            if answer in ("", "y", "yes"):
                self.store.select(project.name)
                self.say(f"[{project.name}] resuming from {project.state.value}")
                self._launch(project.name)
            else:
                self.manager.stop(project.name, "not resumed")
                self.say(f"[{project.name}] task stopped")

    # --- commands -------------------------------------------------------------------------

    def _selected(self) -> Project:
        project = self.store.selected()
        if project is None:
            msg = "no project selected: project select NAME (or project add NAME PATH)"
            raise PolitermError(msg)
        return project

    async def _cmd_help(self, _args: list[str]) -> None:
        self.say(HELP)

    async def _cmd_project(self, args: list[str]) -> None:
        sub = args[0].lower() if args else "list"
        if sub == "list":
            projects = self.store.list_projects()
            if not projects:
                self.say("no projects; project add NAME PATH")
            selected = self.store.selected()
            for p in projects:
                mark = "*" if selected and selected.name == p.name else " "
                self.say(f"{mark} {p.name:<16} {p.state.value:<26} {p.channel:<5} {p.path}")
        elif sub == "add":
            name, path, opts = _parse_add(args[1:])
            opts.setdefault("channel", self.manager.config.channel)
            import pathlib

            p = self.store.add_project(name, pathlib.Path(path), **opts)
            self.say(f"project {p.name} added ({p.path}, {p.channel} channel)")
        elif sub == "select" and len(args) == 2:
            if self.busy and self._running != args[1]:
                self.say(f"error: a task of {self._running} is running; stop it first")
                return
            self.manager.select(args[1])
        else:
            self.say(
                "usage: project add NAME PATH [--goal TEXT] | project list | project select NAME"
            )

    async def _cmd_goal(self, args: list[str]) -> None:
        if not args:
            self.say("usage: goal TEXT")
            return
        if self.busy:
            self.say(f"error: a task of {self._running} is running; stop it first")
            return
        project = self._selected()
        self._hold(project.name)
        self.manager.start(project.name, " ".join(args))
        self._launch(project.name)

    async def _cmd_input(self, args: list[str]) -> None:
        if not args:
            self.say("usage: input TEXT")
            return
        project = self._selected()
        self._hold(project.name)
        self.manager.answer(project.name, " ".join(args))
        self._launch(project.name)

    async def _cmd_stop(self, _args: list[str]) -> None:
        project = self._selected()
        await self._cancel()
        self._hold(project.name)
        project = self.manager.stop(project.name)
        self.say(f"[{project.name}] stopped; state {project.state.value}")

    async def _cmd_status(self, _args: list[str]) -> None:
        project = self._selected()
        for line in status_lines(project, running=self.busy and self._running == project.name):
            self.say(line)


def status_lines(project: Project, *, running: bool = False) -> list[str]:
    """What ``status`` prints about one project."""
    lines = [
        f"project {project.name} ({project.path}, {project.channel} channel)",
        f"state   {project.state.value}" + (" (running here)" if running else ""),
    ]
    if project.goal:
        lines.append(f"goal    {project.goal}")
    if project.task_id:
        lines.append(f"task    {project.task_id} [{project.task_status}]: {project.task_goal}")
        lines.append(
            f"counts  step {project.step}, turns {project.turn_count}, brain calls "
            f"{project.brain_calls}, summaries {project.summaries}"
        )
    if project.question:
        lines.append(f"question {project.question}")
    if project.result:
        lines.append(f"result  {project.result}")
    if project.error:
        lines.append(f"error   {project.error}")
    return lines


def _parse_add(args: list[str]) -> tuple[str, str, dict[str, str]]:
    """``NAME PATH [--goal TEXT] [--channel C] [--agent A]`` → (name, path, options).

    Examples
    --------
    >>> _parse_add(["shop", "/src/shop", "--goal", "ship it", "--channel", "file"])
    ('shop', '/src/shop', {'goal': 'ship it', 'channel': 'file'})
    """
    positional: list[str] = []
    opts: dict[str, str] = {}
    it = iter(args)
    for word in it:
        if word in ("--goal", "--channel", "--agent"):
            value = next(it, None)
            if value is None:
                msg = f"{word} needs a value"
                raise PolitermError(msg)
            opts[word[2:]] = value
        else:
            positional.append(word)
    if len(positional) != 2:
        msg = "usage: project add NAME PATH [--goal TEXT] [--channel pane|file] [--agent PROFILE]"
        raise PolitermError(msg)
    return positional[0], positional[1], opts
