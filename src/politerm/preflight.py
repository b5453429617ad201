"""Configuration checks that need more than the config file: profiles and template files.

``poli.toml`` loads when its values have the right types; an agent profile that does not
exist, or a ``[templates]`` file that is missing or malformed, would only show when an agent
starts or the first prompt is rendered. :func:`problems` finds them up front, for
``poli config``, ``poli doctor`` and ``poli up``.
"""

from __future__ import annotations

import typing as t

from politerm.errors import PolitermError

if t.TYPE_CHECKING:
    from politerm.config import Config


def problems(config: Config) -> list[str]:
    """Every problem of the profiles and templates that ``config`` names, one line each.

    Returns
    -------
    list of str
        ``where: what`` lines; empty when all is well.
    """
    from politerm.agents.profile import load_profile
    from politerm.engine.templates import Templates

    found: list[str] = []
    for name, agent in config.agents.items():
        try:
            load_profile(agent.profile or "generic")
        except PolitermError as exc:
            found.append(f"agents.{name}.profile: {exc}")
    epic_profile = config.epic.agent
    if epic_profile not in config.epic.commands:
        try:
            load_profile(epic_profile)
        except PolitermError as exc:
            found.append(f"epic.agent: {exc}")
    try:
        Templates.from_files(config.templates, contract=config.routing.contract)
    except PolitermError as exc:
        found.append(str(exc))
    return found
