"""politerm's configuration: TOML files and environment variables, validated by pydantic.

Layers, later ones winning key by key (tables are merged, not replaced):

1. built-in defaults (both agents run the bundled fake agent, so ``poli`` works out of the box);
2. the user file, ``platformdirs.user_config_path("politerm") / "poli.toml"``;
3. the project file, ``poli.toml`` in the project directory (or an explicit ``--config``);
4. environment variables: ``PLANNER_CMD``, ``PLANNER_CWD``, ``EXECUTER_CMD``,
   ``EXECUTER_CWD``, ``POLI_TMUX_SOCKET``, ``POLI_TMUX_SESSION``, ``POLI_PLAN_TIMEOUT``,
   ``POLI_EXEC_TIMEOUT``, ``POLI_FLEET_NODE`` (``[fleet] node``, only with a ``[fleet]`` table).

Every bad value raises a :class:`~politerm.errors.ConfigError` whose one-line message names
where the value came from (file or variable), the dotted key and what was expected.
"""

from __future__ import annotations

from politerm.agents.profile import guess_profile
from politerm.config.fleet import FleetBudgetConfig, FleetConfig, redact_url
from politerm.config.loading import ENV_VARS, load_config, use_config_file
from politerm.config.sections import (
    CONFIG_FILENAME,
    DEFAULT_AGENTS,
    NOTIFY_EVENTS,
    AgentConfig,
    Config,
    EpicConfig,
    NotifyConfig,
    RedactConfig,
    RoutingConfig,
    StoreConfig,
    TimeoutsConfig,
    TmuxConfig,
    default_store_path,
    did_you_mean,
    parse_seconds,
    user_config_file,
)

__all__ = [
    "CONFIG_FILENAME",
    "DEFAULT_AGENTS",
    "ENV_VARS",
    "NOTIFY_EVENTS",
    "AgentConfig",
    "Config",
    "EpicConfig",
    "FleetBudgetConfig",
    "FleetConfig",
    "NotifyConfig",
    "RedactConfig",
    "RoutingConfig",
    "StoreConfig",
    "TimeoutsConfig",
    "TmuxConfig",
    "default_store_path",
    "did_you_mean",
    "guess_profile",
    "load_config",
    "parse_seconds",
    "redact_url",
    "use_config_file",
    "user_config_file",
]
