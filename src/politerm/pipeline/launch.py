"""What a step runs: the agent's command line, its profile and the prompt it is given.

Shared by the runner and ``--dry-run``, so a dry run prints exactly what a run would do.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import typing as t

from politerm.agents.profile import load_profile, user_profile_dir
from politerm.errors import PipelineError, ProfileError
from politerm.pipeline.agents import AgentSearch, role_text
from politerm.pipeline.handoff import CLASSIC, Layout
from politerm.pipeline.parser import interactive_cli
from politerm.protocol.primer import render_primer

if t.TYPE_CHECKING:
    import pathlib

    from politerm.agents.profile import AgentProfile
    from politerm.pipeline.model import Pipeline, Step
    from politerm.redact import Redactor

FAKE = "fake"
#: The CLI of steps whose CLI column is ``-`` when ``poli run`` is given no ``--cli``.
DEFAULT_CLI = "claude"
#: The profile the fake agent runs under, and its bundled scenario for pipeline steps.
FAKE_PROFILE = "fake-claude"
FAKE_SCENARIO = "pipeline-step"
#: The tools a headless claude step may use without asking (META's ``--allowedTools``).
CLAUDE_ALLOWED_TOOLS = "Bash Edit Read Write Glob Grep"
#: One-shot arguments of the CLIs that have a headless mode; the prompt comes last.
HEADLESS_ARGS: dict[str, tuple[str, ...]] = {
    # -p after the list: --allowedTools takes several values and would swallow the prompt.
    "claude": ("--allowedTools", CLAUDE_ALLOWED_TOOLS, "-p"),
    "codex": ("exec",),
    "gemini": ("-p",),
}
#: CLIs whose ``unsafe_args`` ``--unsafe`` adds; a user profile that sets them opts in.
UNSAFE_BY_DEFAULT = frozenset({"claude"})
DONE_TO = "ORCH"
DONE_TYPE = "done"


def step_cli(step: Step, run_cli: str, *, override: bool = False) -> str:
    """The CLI a step runs on.

    ``--cli fake`` wins; a ``claude-interactive`` step keeps its CLI and an ``interactive``
    step opens the run's CLI; a ``--cli`` given on the command line (``override``) replaces
    every other step's column, as ``meta run --cli`` does; otherwise the step's column, then
    the default.

    Examples
    --------
    >>> from politerm.pipeline.model import Gate, Step
    >>> s = Step(1, "dev", "codex", Gate.AUTO, None, None, "go")
    >>> step_cli(s, "claude"), step_cli(s, "fake"), step_cli(s, "gemini", override=True)
    ('codex', 'fake', 'gemini')
    >>> step_cli(Step(2, "dev", "interactive", Gate.AUTO, None, None, "go"), "codex")
    'codex'
    >>> step_cli(Step(3, "dev", "claude-interactive", Gate.AUTO, None, None, "go"), "codex",
    ...          override=True)
    'claude'
    """
    if run_cli == FAKE:
        return FAKE
    interactive, named = interactive_cli(step.cli)
    if interactive and named is not None:
        return named
    if override or interactive:
        return run_cli
    return step.cli or run_cli


def step_id(num: int) -> str:
    """The id a step's ``done`` block carries.

    Examples
    --------
    >>> step_id(4)
    'step-4'
    """
    return f"step-{num}"


@dataclasses.dataclass(frozen=True)
class Launch:
    """How one attempt of a step is started."""

    cli: str
    profile: AgentProfile
    argv: tuple[str, ...]
    headless: bool
    log: pathlib.Path | None = None
    #: A human-driven step: the run waits for a person to mark it done.
    interactive: bool = False

    @property
    def command_line(self) -> str:
        """The argv as one shell-quoted line (for people and dry runs)."""
        return shlex.join(self.argv)


def _unsafe_args(cli: str, profile: AgentProfile) -> list[str]:
    if cli in UNSAFE_BY_DEFAULT or (user_profile_dir() / f"{cli}.toml").is_file():
        return list(profile.unsafe_args)
    return []


def launch(
    step: Step,
    *,
    run_cli: str,
    steps_dir: pathlib.Path,
    attempt: int,
    headless: bool,
    unsafe: bool,
    override: bool = False,
) -> Launch:
    """The command line of attempt ``attempt`` of ``step``.

    An ``interactive`` step always runs in its TUI, even in a headless run.

    Raises
    ------
    PipelineError
        A headless run on a CLI without a headless mode, or an unknown CLI.
    """
    cli = step_cli(step, run_cli, override=override)
    interactive = interactive_cli(step.cli)[0]
    headless = headless and not interactive
    tag = f"step-{step.num}.a{attempt}"
    if cli == FAKE:
        profile = load_profile(FAKE_PROFILE)
        log = steps_dir / f"{tag}.jsonl"
        argv = [
            sys.executable, "-m", "politerm.testing.fakeagent", "--mode", "claude",
            "--scenario", FAKE_SCENARIO, "--log", str(log), "--name", f"step-{step.num}",
        ]  # fmt: skip
        if headless:
            argv = [*_wrapper(steps_dir, step.num, attempt), "--", *argv, "--print"]
        return Launch(cli, profile, tuple(argv), headless, log, interactive)
    try:
        profile = load_profile(cli)
    except ProfileError as exc:
        msg = f"step {step.num}: {exc}"
        raise PipelineError(msg) from None
    if not profile.command:
        msg = f"step {step.num}: profile {cli!r} has no command"
        raise PipelineError(msg)
    extra = _unsafe_args(cli, profile) if unsafe else []
    if headless:
        if cli not in HEADLESS_ARGS:
            known = ", ".join(sorted(HEADLESS_ARGS))
            msg = f"step {step.num}: {cli} has no headless mode (known: {known})"
            raise PipelineError(msg)
        agent = [profile.command[0], *HEADLESS_ARGS[cli], *extra]
        argv = [*_wrapper(steps_dir, step.num, attempt), "--", *agent]
        return Launch(cli, profile, tuple(argv), headless)
    return Launch(cli, profile, (*profile.command, *extra), headless, interactive=interactive)


def _wrapper(steps_dir: pathlib.Path, num: int, attempt: int) -> list[str]:
    return [
        sys.executable, "-m", "politerm.pipeline._headless",
        "--exit-file", str(exit_file(steps_dir, num)),
        "--prompt-file", str(prompt_file(steps_dir, num, attempt)),
    ]  # fmt: skip


def exit_file(steps_dir: pathlib.Path, num: int) -> pathlib.Path:
    """``.poli/steps/<run id>/step-N.exit``: a headless step's exit status."""
    return steps_dir / f"step-{num}.exit"


def prompt_file(steps_dir: pathlib.Path, num: int, attempt: int) -> pathlib.Path:
    """Where the prompt of an attempt is saved (headless steps read it from there)."""
    return steps_dir / f"step-{num}.a{attempt}.prompt.md"


def render_prompt(
    pipeline: Pipeline,
    step: Step,
    *,
    run_id: str,
    attempt: int,
    project: pathlib.Path,
    nonce: str | None,
    parallel: bool,
    layout: Layout = CLASSIC,
    search: AgentSearch | None = None,
    task: str | None = None,
    redactor: Redactor | None = None,
) -> str:
    """The prompt of one attempt of a step.

    It holds the agent's role, an instruction to read the handoff file first, the step's task,
    where to write the handoff notes, and (for a TUI step, ``nonce`` given) how to say it is
    done: a ``done`` block to ORCH with the step's id and this attempt's nonce. ``layout``
    names the handoff files, ``search`` finds the role. A ``task`` holding secrets is
    repeated in the prompt: the handoff file shows them redacted, the prompt is delivered
    with the originals (see :mod:`politerm._internal.vault`); ``redactor`` finds them
    (the store's: the built-in patterns and the config's).
    """
    main = layout.main
    handoff = layout.step(step.num) if parallel else main
    if parallel:
        notes = (
            f"Write your notes for the next steps to {handoff} (not {main}: other steps are "
            f"working at the same time); they are merged into {main} when the group is done."
        )
    else:
        notes = (
            f"Update {main}: keep what is there and add a section '## Step {step.num} "
            f"({step.agent})' with what you did, what you decided and what the next steps "
            "must know."
        )
    mode = "tui" if nonce is not None else "headless"
    lines = [
        f"POLI_STEP={step.num} ATTEMPT={attempt} RUN={run_id} MODE={mode}",
        (
            f'You are step {step.num} of {len(pipeline.steps)} of the "{pipeline.name}" '
            f"pipeline, working as the {step.agent} agent."
        ),
        "",
        "# Your role",
        role_text(step.agent, project, search),
        "",
        "# First",
        f"Read {main}: it holds the task and the notes of the steps before you.",
        "",
        "# Your task",
        step.prompt,
        "",
        *_secret_task(task, redactor),
        "# When you are done",
        f"HANDOFF_FILE={handoff}",
        notes,
    ]
    if nonce is not None:
        lines += [
            "",
            render_primer(
                DONE_TO,
                DONE_TYPE,
                step_id(step.num),
                nonce,
                what="one short paragraph: what you did and where",
            ),
        ]
    else:
        lines.append("Then stop: your exit status tells whether the step succeeded.")
    return "\n".join(lines) + "\n"


def _secret_task(task: str | None, redactor: Redactor | None) -> list[str]:
    from politerm._internal.vault import needs_reveal
    from politerm.redact import Redactor

    if not task or not (needs_reveal(task) or (redactor or Redactor()).tagged(task)[1]):
        return []
    return [
        "# The user's task, with the secrets that the handoff file shows redacted",
        task.strip(),
        "",
    ]
