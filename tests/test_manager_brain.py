"""The SDK brains (google-genai, anthropic, openai) against the loopback mock model server:
replies, 429s and 5xx retried with backoff, timeouts, garbage bodies, bad keys and models."""

from __future__ import annotations

import asyncio
import typing as t

import pytest

from politerm.config.manager import BrainSettings
from politerm.errors import (
    BrainAuthError,
    BrainError,
    BrainModelError,
    BrainReplyError,
    BrainTimeout,
)
from politerm.manager.brain import API_BRAINS, ApiBrain, resolve_key
from politerm.redact import Redactor
from politerm.testing.mockllm import MockLLM, Rule

PROVIDERS = sorted(API_BRAINS)


def brain(
    llm: MockLLM,
    provider: str,
    key: str | None = None,
    sleep: t.Callable[[float], t.Awaitable[None]] = asyncio.sleep,
    **kw: t.Any,
) -> ApiBrain:
    settings = BrainSettings(
        provider=provider,  # type: ignore[arg-type]
        base_url=llm.url,
        model="mock-model",
        backoff=0.01,
        **{"max_retries": 2, "call_timeout": 10.0, **kw},
    )
    return API_BRAINS[provider](settings, key or llm.token, Redactor(), sleep=sleep)


async def ask(b: ApiBrain, prompt: str) -> str:
    try:
        async with asyncio.timeout(60):
            return await b.ask(prompt, system="You are the manager.")
    finally:
        await b.aclose()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_reply_goes_through_the_official_sdk(provider: str) -> None:
    with MockLLM([Rule("plan it", "Create hello.py")], sides=False) as llm:
        assert await ask(brain(llm, provider), "please plan it") == "Create hello.py"
        (req,) = llm.requests()
        assert "please plan it" in req.user_text
        assert "You are the manager." in str(req.body)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_and_5xx_are_retried_with_backoff(provider: str) -> None:
    rules = [
        Rule("go", status=429, times=1),
        Rule("go", status=503, times=1),
        Rule("go", "Step one."),
    ]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the real sleep, watched
        waits.append(seconds)
        await asyncio.sleep(seconds)

    with MockLLM(rules, sides=False) as llm:
        b = brain(llm, provider, sleep=sleep)
        assert await ask(b, "go") == "Step one."
        assert (b.calls, b.retries) == (3, 2)
        assert len(llm.requests()) == 3
    assert waits == [0.01, 0.02]  # the backoff doubles


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retries_run_out_with_a_clear_error(provider: str) -> None:
    with MockLLM([Rule("go", status=429)], sides=False) as llm:
        b = brain(llm, provider, max_retries=1)
        with pytest.raises(BrainError, match=r"gave up after 2 attempts: HTTP 429"):
            await ask(b, "go")
        assert len(llm.requests()) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_call_that_hangs_times_out(provider: str) -> None:
    with MockLLM([Rule("go", "late", delay=5.0)], sides=False) as llm:
        b = brain(llm, provider, call_timeout=0.5, max_retries=1)
        with pytest.raises(BrainTimeout, match=r"no answer within 0.5s \(2 attempts\)"):
            await ask(b, "go")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_garbage_body_is_a_reply_error(provider: str) -> None:
    with (
        MockLLM([Rule("go", raw="<html>\x00not json")], sides=False) as llm,
        pytest.raises(BrainReplyError, match="could not be read"),
    ):
        await ask(brain(llm, provider), "go")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_bad_key_is_named_and_never_shown(provider: str) -> None:
    wrong = "sk-proj-" + "W" * 40
    with MockLLM([Rule(".*", "x")], sides=False) as llm:
        with pytest.raises(BrainAuthError, match="rejected the key") as info:
            await ask(brain(llm, provider, key=wrong), "go")
        assert wrong not in str(info.value)
        assert len(llm.requests(side=None)) == 0  # refused before any rule answered


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_unknown_model_is_named(provider: str) -> None:
    with (
        MockLLM([Rule(".*", status=404)], sides=False) as llm,
        pytest.raises(BrainModelError, match="unknown model 'mock-model'"),
    ):
        await ask(brain(llm, provider), "go")


def test_key_comes_from_the_environment_or_config() -> None:
    s = BrainSettings(provider="gemini")
    assert resolve_key(s, {"GOOGLE_API_KEY": "g1"}) == "g1"
    assert resolve_key(s, {"GEMINI_API_KEY": "g2", "GOOGLE_API_KEY": "g1"}) == "g2"
    own = BrainSettings(provider="openai", api_key_env="MY_KEY", api_key="from-config")
    assert resolve_key(own, {"MY_KEY": "env", "OPENAI_API_KEY": "x"}) == "env"
    assert resolve_key(own, {}) == "from-config"
    with pytest.raises(BrainAuthError, match="set ANTHROPIC_API_KEY"):
        resolve_key(BrainSettings(provider="anthropic"), {})
    assert "from-config" not in repr(own)


@pytest.mark.parametrize(
    ("provider", "module"),
    [("gemini", "google.genai"), ("anthropic", "anthropic"), ("openai", "openai")],
)
def test_a_missing_sdk_names_its_extra_and_the_base_install_has_none(
    provider: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pathlib
    import sys
    import tomllib

    from politerm.config import Config
    from politerm.config.manager import DEFAULT_KEY_ENV, ManagerConfig
    from politerm.manager.app import make_brain

    monkeypatch.setitem(sys.modules, module, None)  # as if the extra was not installed
    env = {DEFAULT_KEY_ENV[provider][0]: "k"}
    settings = BrainSettings(provider=provider)  # type: ignore[arg-type]
    with pytest.raises(BrainError, match=rf"needs its SDK: pip install 'politerm\[{provider}\]'"):
        make_brain(Config(manager=ManagerConfig(brain=settings)), env)
    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    package = module.split(".")[-1].replace("genai", "google-genai")
    assert not [d for d in project["dependencies"] if d.startswith(package)]
    assert any(d.startswith(package) for d in project["optional-dependencies"][provider])
