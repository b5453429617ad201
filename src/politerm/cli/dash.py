"""``poli dash``: the terminal dashboard (sessions, agents, approvals, live panes, events)."""

from __future__ import annotations

import pathlib

import click

from politerm.cli._common import as_view, config_option, load, open_store, project_option


@click.command("dash")
@click.option("--agent", help="Mirror this agent's pane from the start.")
@project_option
@config_option
def command(agent: str | None, config_path: pathlib.Path | None) -> None:
    """Watch and steer live: agents, states, approvals, tasks, gates, a live pane mirror.

    Keys: a approve, d deny, n answer a question, g answer a gate, x abort a task, t attach
    to the selected agent's pane, / filter, q quit.
    """
    from politerm.ui.dash import DashApp
    from politerm.ui.projects import shown_with

    config = load(config_path)
    as_view()
    with open_store(config) as store:
        others = shown_with(config)
        DashApp(config, store, project=config.project.root, agent=agent, others=others).run()
