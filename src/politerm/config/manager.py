"""The ``[manager]`` table of ``poli.toml``: the brain, the dev agent, bounds and budgets.

It imports nothing but pydantic, because :mod:`politerm.config` loads it for every command.
"""

from __future__ import annotations

import typing as t

from pydantic import BaseModel, ConfigDict, Field

_SECONDS = "a number of seconds > 0"

DEFAULT_MODELS: t.Final[t.Mapping[str, str]] = {
    "gemini": "gemini-2.5-pro",
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-5",
}
"""The model each provider uses when ``[manager.brain] model`` is not set."""

DEFAULT_KEY_ENV: t.Final[t.Mapping[str, tuple[str, ...]]] = {
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
}
"""Environment variables each provider's key is read from, first set one wins."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class BrainSettings(_Section):
    """Which model (or agent) plans, and how calls to it are bounded."""

    provider: t.Literal["gemini", "anthropic", "openai", "agent"] = Field(
        default="gemini", description="one of 'gemini', 'anthropic', 'openai', 'agent'"
    )
    model: str = Field(default="", description="a model name ('' = the provider's default)")
    api_key_env: str = Field(
        default="", description="the name of the environment variable holding the API key"
    )
    api_key: str | None = Field(
        default=None, repr=False, description="an API key (better: api_key_env)"
    )
    base_url: str = Field(default="", description="an http(s) URL ('' = the provider's own)")
    agent: str = Field(
        default="claude", min_length=1, description="an agent profile name (provider 'agent')"
    )
    command: list[str] = Field(
        default_factory=list, description="the brain agent's command ([] = its profile's)"
    )
    call_timeout: float = Field(default=120.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    max_retries: int = Field(default=4, ge=0, le=20, description="a whole number 0..20")
    backoff: float = Field(default=1.0, ge=0, allow_inf_nan=False, description=_SECONDS)
    max_tokens: int = Field(default=4096, ge=16, description="a whole number >= 16")

    def model_name(self) -> str:
        """The configured model, or the provider's default."""
        return self.model or DEFAULT_MODELS.get(self.provider, "")


class ManagerConfig(_Section):
    """Manager mode (``poli manager``)."""

    brain: BrainSettings = Field(default_factory=BrainSettings, description="a table")
    dev_agent: str = Field(
        default="claude", min_length=1, description="the dev agent's profile (pane channel)"
    )
    dev_command: list[str] = Field(
        default_factory=list, description="the dev agent's command ([] = its profile's)"
    )
    channel: t.Literal["pane", "file"] = Field(default="pane", description="one of 'pane', 'file'")
    step_timeout: float = Field(default=1800.0, gt=0, allow_inf_nan=False, description=_SECONDS)
    summarize_after_turns: int = Field(default=20, ge=2, description="a whole number >= 2")
    summarize_tokens: int = Field(default=12000, ge=100, description="a whole number >= 100")
    keep_recent_turns: int = Field(default=4, ge=0, description="a whole number >= 0")
    overview_files: int = Field(default=200, ge=0, description="a whole number >= 0")
    readme_lines: int = Field(default=40, ge=0, description="a whole number >= 0")
    file_stable_seconds: float = Field(default=2.0, gt=0, allow_inf_nan=False, description=_SECONDS)
