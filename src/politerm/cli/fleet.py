"""``poli fleet``: the project's fleet of nodes (``status``) and its budget (``budget``)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import typing as t

import click

from politerm.cli._common import config_option, load, open_store, project_option
from politerm.config import FleetBudgetConfig
from politerm.errors import FleetError

if t.TYPE_CHECKING:
    from politerm.fleet.budget import FleetBudget

# The caps [fleet.budget] names; politerm.fleet (redis-py) is imported only when used.
_CAP_NAMES = tuple(FleetBudgetConfig.model_fields)


@click.group("fleet")
def command() -> None:
    """The project's fleet: nodes, leases and work across machines (docs/fleet.md)."""


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@config_option
@project_option
def status(as_json: bool, config_path: pathlib.Path | None) -> None:
    """Nodes (alive, lag, agents, load), leases, work in flight, dead letters, approvals."""
    config = load(config_path)
    if config.fleet is None:
        msg = "no [fleet] table in poli.toml: this project runs on one machine (docs/fleet.md)"
        raise FleetError(msg)
    from politerm.engine.fleetview import fleet_status, render_text

    with open_store(config) as store:
        data = fleet_status(config, store)
    click.echo(json.dumps(data, indent=2, default=str) if as_json else render_text(data))


def _budget(config_path: pathlib.Path | None) -> tuple[FleetBudget, list[str]]:
    config = load(config_path)
    if config.fleet is None:
        msg = "no [fleet] table in poli.toml: this project runs on one machine (docs/fleet.md)"
        raise FleetError(msg)
    from politerm.engine.fleetlink import open_queue
    from politerm.fleet.budget import Caps, FleetBudget

    breaker = FleetBudget(open_queue(config), Caps.from_config(config.fleet.budget))
    return breaker, sorted(config.agents)


@command.group("budget", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the spending as JSON.")
@config_option
@project_option
@click.pass_context
def budget(ctx: click.Context, as_json: bool, config_path: pathlib.Path | None) -> None:
    """Today's spending of the project and each agent against [fleet.budget]'s caps."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = config_path
        return
    from politerm.engine.fleetview import paused_lines
    from politerm.fleet.budget import spending_words

    breaker, agents = _budget(config_path)
    rows = breaker.spending(agents)
    paused = [p._asdict() for p in breaker.queue.ledger.paused()]
    if as_json:
        scopes = [{**dataclasses.asdict(r), "over": r.over} for r in rows]
        click.echo(json.dumps({"scopes": scopes, "paused": paused}, indent=2))
        return
    click.echo(f"fleet budget for {rows[0].day} (UTC)")
    for r in rows:
        click.echo(f"  {r.scope}: {spending_words(r)}")
    for line in paused_lines(paused):
        click.echo(f"  {line}")


@budget.command("set")
@click.argument("name", type=click.Choice(_CAP_NAMES))
@click.argument("value")
@click.option("--agent", help="Only this agent's cap (agent_tokens_per_day, agent_cost_per_day).")
@click.pass_obj
def budget_set(config_path: pathlib.Path | None, name: str, value: str, agent: str | None) -> None:
    """Set cap NAME to VALUE (or 'none') for the whole fleet, over every node's poli.toml."""
    try:
        number = None if value == "none" else float(value)
    except ValueError:
        msg = f"{name}: expected a number > 0 or 'none', got {value!r}"
        raise FleetError(msg) from None
    breaker, _ = _budget(config_path)
    breaker.set_cap(name, number, agent=agent)
    click.echo(f"{name}{f' of {agent}' if agent else ''} = {value} for the whole fleet")
    _resumes(breaker)


@budget.command("clear")
@click.pass_obj
def budget_clear(config_path: pathlib.Path | None) -> None:
    """Forget the caps set with 'set': every node's [fleet.budget] applies again."""
    breaker, _ = _budget(config_path)
    breaker.clear_caps()
    click.echo("the fleet's budget caps are [fleet.budget]'s again")
    _resumes(breaker)


@budget.command("reset")
@click.option("--agent", help="Only this agent's spending (default: the project's).")
@click.pass_obj
def budget_reset(config_path: pathlib.Path | None, agent: str | None) -> None:
    """Forget today's spending of the project (or of one agent): its turns may start again."""
    breaker, _ = _budget(config_path)
    breaker.reset(agent)
    click.echo(f"today's spending of {f'agent {agent}' if agent else 'the project'} is reset")
    _resumes(breaker)


def _resumes(breaker: FleetBudget) -> None:
    """Say what becomes of the work the budget paused (its nodes look every few seconds)."""
    paused = breaker.queue.ledger.paused()
    if paused:
        click.echo(
            f"{len(paused)} paused work(s) go on within seconds where the caps now allow a turn "
            "(`poli fleet budget` lists what still waits)"
        )
