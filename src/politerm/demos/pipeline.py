"""``poli demo pipeline``: a three-step pipeline on the fake agent, notes handed along."""

from __future__ import annotations

import shlex

from politerm.demos._scratch import Outcome, Say, Scratch
from politerm.pipeline import ops
from politerm.pipeline.model import RunStatus
from politerm.pipeline.state import session_name

RUN_ID = "demo"
TASK = "Add a --verbose flag"
PIPELINE = """\
name: demo
description: a product manager, a developer and a tester hand notes along
timeout_min: 2

# NUM | AGENT | CLI | GATE | PARALLEL_GROUP | TIMEOUT_MIN | PROMPT
1 | product-manager | fake | auto | - | - | Write a short PRD for the task
2 | developer       | fake | gate | - | - | Implement what the PRD asks
3 | tester          | fake | auto | - | - | Check the implementation against the PRD
"""


async def run(*, say: Say, keep: bool = False) -> Outcome:
    """Run the ``demo`` pipeline (one gate, approved automatically) in a scratch project.

    Each fake step appends its notes to the project's ``.handoff.md``, so the handoff
    builds up step by step; the summary shows it.
    """
    scratch = Scratch.make("pipeline")
    # The run's session is where `poli attach --project` looks.
    scratch.session = session_name(scratch.root, RUN_ID)
    scratch.write_config("[timeouts]\nready = 30\n")
    pipelines = scratch.root / ".poli" / "pipelines"
    pipelines.mkdir(parents=True, mode=0o700)
    (pipelines / "demo.pipeline").write_text(PIPELINE)
    try:
        state = await ops.run_new(
            "demo",
            project=scratch.root,
            task=TASK,
            cli="fake",
            run_id=RUN_ID,
            on_fail="abort",
            say=say,
            auto_approve=True,
            keep=keep,
        )
        handoff = scratch.root / ".handoff.md"
        notes = handoff.read_text() if handoff.is_file() else "(missing)"
        status = state.record.status
        steps = sum(1 for line in notes.splitlines() if line.startswith("Notes from step"))
        summary = [
            f"run {RUN_ID}: {status.value}; {steps} steps appended their notes to .handoff.md",
            f".handoff.md:\n{notes.rstrip()}",
        ]
        look: list[str] = []
        if keep:
            look = [
                *scratch.keep_lines(down_args=f" --run-id {RUN_ID}"),
                f"  status:    poli status --project {shlex.quote(str(scratch.root))}",
            ]
        return Outcome(status is RunStatus.DONE and steps == 3, summary, look)
    finally:
        if not keep:
            await scratch.remove()
