"""``poli run --dry-run``: print exactly what a run would do, starting nothing."""

from __future__ import annotations

import shlex
import typing as t

from politerm.pipeline.handoff import CLASSIC, Layout
from politerm.pipeline.launch import launch, render_prompt, step_cli
from politerm.pipeline.model import Gate
from politerm.pipeline.runner import GATE_QUESTION, FailurePolicy, control_argv
from politerm.pipeline.state import session_name, steps_dir
from politerm.pipeline.worktrees import branch, path_of

if t.TYPE_CHECKING:
    import pathlib

    from politerm.pipeline.agents import AgentSearch
    from politerm.pipeline.model import Pipeline

NONCE_PLACEHOLDER = "<nonce>"


def dry_run(
    pipeline: Pipeline,
    *,
    project: pathlib.Path,
    task: str,
    cli: str,
    run_id: str,
    socket: str,
    headless: bool = False,
    unsafe: bool = False,
    use_worktrees: bool = False,
    on_fail: str = "ask",
    override: bool = False,
    auto_approve: bool = False,
    layout: Layout = CLASSIC,
    search: AgentSearch | None = None,
) -> str:
    """The plan of a run as text: session, windows, commands, prompts and gates.

    The per-attempt nonce is shown as ``<nonce>``; everything else is what a run with the
    same arguments and run id would use.
    """
    policy = FailurePolicy.parse(on_fail)
    session = session_name(project, run_id)
    sdir = steps_dir(project, run_id)
    out = [
        f"pipeline: {pipeline.name} ({pipeline.path})",
        f"run id: {run_id}",
        f"project: {project}",
        f"tmux: socket {socket}, session {session}",
        f"window 0 control: {shlex.join(control_argv(project, run_id))}",
        f"state: {project / '.poli' / f'state.{run_id}'}; steps dir: {sdir}",
        f"handoff: writes {project / layout.main} with the task: {task}",
        (
            f"mode: {'headless (exit code)' if headless else 'interactive TUI (done block)'}"
            f"; on failure: {policy}; unsafe: {'yes' if unsafe else 'no'}"
            f"; worktrees: {'yes' if use_worktrees else 'no'}"
            f"; gates: {'approved automatically' if auto_approve else 'asked'}"
            f"; --cli: {cli} ({'every step' if override else 'steps whose CLI is -'})"
        ),
    ]
    for index, stage in enumerate(pipeline.stages(), start=1):
        parallel = stage[0].group is not None
        label = f"parallel group {stage[0].group}" if parallel else "step"
        out += ["", f"== stage {index}: {label} " + ", ".join(str(s.num) for s in stage)]
        for step in stage:
            spec = launch(
                step,
                run_cli=cli,
                steps_dir=sdir,
                attempt=1,
                headless=headless,
                unsafe=unsafe,
                override=override,
            )
            minutes = step.timeout_min if step.timeout_min is not None else pipeline.timeout_min
            cwd = path_of(project, run_id, step.num) if use_worktrees and parallel else project
            out += [
                (
                    f"-- step {step.num}: {step.agent} on {step_cli(step, cli, override=override)}"
                    f"{' (interactive: a person marks it done)' if spec.interactive else ''}, "
                    f"timeout {minutes:g} min"
                ),
                f"   window: {step.window} (cwd {cwd})",
                f"   command: {spec.command_line}",
            ]
            if use_worktrees and parallel:
                out.append(
                    f"   worktree branch: {branch(run_id, step.num)}, merged at the sync point"
                )
            gate = f'after the step: "{GATE_QUESTION}"' if step.gate is Gate.GATE else "none"
            out.append(f"   gate: {gate}")
            prompt = render_prompt(
                pipeline,
                step,
                run_id=run_id,
                attempt=1,
                project=project,
                nonce=None if spec.headless else NONCE_PLACEHOLDER,
                parallel=parallel,
                layout=layout,
                search=search,
            )
            out.append("   prompt:")
            out += [f"   | {line}".rstrip() for line in prompt.splitlines()]
        if parallel:
            out.append(
                f"-- sync: merge {layout.step_pattern} files into {layout.main} in step order"
            )
    return "\n".join(out) + "\n"
