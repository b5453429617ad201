"""The manager's brain: a model behind a provider's official SDK, with bounded, retried calls.

:class:`ApiBrain` holds what every provider shares: the key (from the environment or the
config, never stored or logged), one ``asyncio.timeout`` per call, retries with exponential
backoff on 429, 5xx, timeouts and dropped connections, and one clear error for a bad key
(:class:`~politerm.errors.BrainAuthError`) or model name
(:class:`~politerm.errors.BrainModelError`). The SDKs' own retries are off so that this is
the only policy. A body the SDK cannot read becomes a
:class:`~politerm.errors.BrainReplyError`, which the engine retries once like any malformed
reply. The brain that is a politerm agent lives in :mod:`politerm.manager.pane`.
"""

from __future__ import annotations

import asyncio
import json
import os
import typing as t

from politerm.config.manager import DEFAULT_KEY_ENV
from politerm.errors import (
    BrainAuthError,
    BrainError,
    BrainModelError,
    BrainReplyError,
    BrainTimeout,
)

if t.TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from politerm.config.manager import BrainSettings
    from politerm.redact import Redactor

_RETRY_STATUS: t.Final = frozenset({408, 409, 429})
_MAX_DELAY: t.Final = 30.0


class Brain(t.Protocol):
    """What the engine needs from a brain."""

    async def ask(self, prompt: str, *, system: str) -> str:
        """One reply to ``prompt`` under ``system``; raises :class:`BrainError` subclasses."""
        ...

    async def aclose(self) -> None:
        """Release connections (and agents)."""
        ...


def resolve_key(settings: BrainSettings, env: Mapping[str, str] | None = None) -> str:
    """The API key: ``api_key_env``'s variable, the config's ``api_key``, or the defaults.

    The provider's default variables (:data:`~politerm.config.manager.DEFAULT_KEY_ENV`)
    come last.

    Raises
    ------
    BrainAuthError
        No key anywhere; the message names where it was looked for.
    """
    env = os.environ if env is None else env
    names = (settings.api_key_env,) if settings.api_key_env else ()
    for name in names:
        if env.get(name):
            return env[name]
    if settings.api_key:
        return settings.api_key
    defaults = DEFAULT_KEY_ENV.get(settings.provider, ())
    for name in defaults:
        if env.get(name):
            return env[name]
    where = " or ".join((*names, *defaults)) or "an environment variable"
    msg = (
        f"no API key for the {settings.provider} brain: set {where}, or "
        "[manager.brain] api_key_env in poli.toml"
    )
    raise BrainAuthError(msg)


def backoff_delay(first: float, retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (1, 2, …): doubling, at most 30 s.

    Examples
    --------
    >>> [backoff_delay(1.0, n) for n in (1, 2, 3, 6)]
    [1.0, 2.0, 4.0, 30.0]
    """
    return min(_MAX_DELAY, first * 2.0 ** (retry - 1))


def _status(exc: BaseException) -> int | None:
    for attr in ("status_code", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


class ApiBrain:
    """Shared call policy of the SDK brains; subclasses implement :meth:`_connect`, :meth:`_call`.

    Parameters
    ----------
    settings
        ``[manager.brain]``.
    key
        The API key (see :func:`resolve_key`); only ever handed to the SDK.
    redactor
        Cleans every error message (which could quote a request) before it leaves.
    sleep
        The backoff's sleep; tests keep the real one and set ``backoff`` small.
    """

    provider: t.ClassVar[str] = ""
    #: Exception types of the SDK that mean "the connection failed or timed out: retry".
    transient: tuple[type[BaseException], ...] = ()
    _client: t.Any

    def __init__(
        self,
        settings: BrainSettings,
        key: str,
        redactor: Redactor,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.model = settings.model_name()
        self._key = key
        self._redactor = redactor
        self._sleep = sleep
        self.calls = 0
        self.retries = 0
        self._connect(key)

    @property
    def label(self) -> str:
        """``provider:model``."""
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"  # never the key

    def _connect(self, key: str) -> None:
        """Build the SDK's client (``_client``) and name its ``transient`` errors."""
        raise NotImplementedError

    async def _call(self, prompt: str, system: str) -> str:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the SDK's HTTP client."""
        await self._client.close()

    def _clean(self, exc: BaseException) -> str:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return self._redactor.redact(text.replace(self._key, "[REDACTED:key]"))[:300]

    async def ask(self, prompt: str, *, system: str) -> str:
        """One reply, retried with backoff on transient failures.

        Raises
        ------
        BrainAuthError
            401/403: the key is wrong or not allowed.
        BrainModelError
            404 (or a 400 naming the model): the model name is unknown.
        BrainTimeout
            Every attempt timed out.
        BrainReplyError
            The API's answer could not be read (garbage, not its JSON).
        BrainError
            Retries exhausted on 429/5xx/connection errors, or another API error.
        """
        attempts = 1 + self.settings.max_retries
        last = ""
        timed_out = False
        for attempt in range(attempts):
            if attempt:
                self.retries += 1
                await self._sleep(backoff_delay(self.settings.backoff, attempt))
            self.calls += 1
            try:
                async with asyncio.timeout(self.settings.call_timeout):
                    return await self._call(prompt, system)
            except TimeoutError:
                timed_out = True
                last = f"no answer within {self.settings.call_timeout:g}s"
                continue
            except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
                if _status(exc) is None:
                    msg = f"{self.label}: the API's answer could not be read: {self._clean(exc)}"
                    raise BrainReplyError(msg) from None
                raise self._status_error(exc) from None
            except self.transient as exc:
                timed_out = False
                last = self._clean(exc)
                continue
            except Exception as exc:  # noqa: BLE001  # every SDK error class, sorted by status
                status = _status(exc)
                if status is not None and (status in _RETRY_STATUS or status >= 500):
                    timed_out = False
                    last = f"HTTP {status}: {self._clean(exc)}"
                    continue
                raise self._status_error(exc) from None
        if timed_out:
            msg = f"{self.label}: {last} ({attempts} attempt{'s' * (attempts > 1)})"
            raise BrainTimeout(msg)
        msg = f"{self.label}: gave up after {attempts} attempts: {last}"
        raise BrainError(msg)

    def _status_error(self, exc: BaseException) -> BrainError:
        status = _status(exc)
        text = self._clean(exc)
        if status in (401, 403) or ("api key" in text.lower() and status == 400):
            return BrainAuthError(f"{self.label}: the API rejected the key (HTTP {status})")
        if status == 404 or (status == 400 and "model" in text.lower()):
            return BrainModelError(f"{self.label}: unknown model {self.model!r} (HTTP {status})")
        if status is not None:
            return BrainError(f"{self.label}: HTTP {status}: {text}")
        return BrainError(f"{self.label}: {type(exc).__name__}: {text}")


def _need(module: str, extra: str) -> t.Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        msg = f"the {extra} brain needs its SDK: pip install 'politerm[{extra}]'"
        raise BrainError(msg) from None


class GeminiBrain(ApiBrain):
    """Google Gemini through ``google-genai``."""

    provider = "gemini"

    def _connect(self, key: str) -> None:
        genai = _need("google.genai", "gemini")
        types = _need("google.genai.types", "gemini")
        self._types = types
        options = {"api_version": "v1beta"}
        if self.settings.base_url:
            options["base_url"] = self.settings.base_url
        self._client = genai.Client(api_key=key, http_options=types.HttpOptions(**options))
        self.transient = tuple(_transport_errors())

    async def _call(self, prompt: str, system: str) -> str:
        config = self._types.GenerateContentConfig(
            system_instruction=system, max_output_tokens=self.settings.max_tokens
        )
        response = await self._client.aio.models.generate_content(
            model=self.model, contents=prompt, config=config
        )
        return str(response.text or "")

    async def aclose(self) -> None:
        """Close the SDK's async client (older SDKs have no ``aclose``)."""
        close = getattr(self._client.aio, "aclose", None)
        if close is not None:
            await close()


class AnthropicBrain(ApiBrain):
    """Anthropic Claude through ``anthropic``."""

    provider = "anthropic"

    def _connect(self, key: str) -> None:
        anthropic = _need("anthropic", "anthropic")
        self._client = anthropic.AsyncAnthropic(
            api_key=key, base_url=self.settings.base_url or None, max_retries=0
        )
        self.transient = (anthropic.APIConnectionError,)

    async def _call(self, prompt: str, system: str) -> str:
        message = await self._client.messages.create(
            model=self.model,
            max_tokens=self.settings.max_tokens,
            system=system,
            messages=[{"role": "user", "content": prompt}],
        )
        return "".join(
            str(getattr(block, "text", "")) for block in message.content if block.type == "text"
        )


class OpenAIBrain(ApiBrain):
    """OpenAI through ``openai`` (Chat Completions, which every compatible server speaks)."""

    provider = "openai"

    def _connect(self, key: str) -> None:
        openai = _need("openai", "openai")
        base = self.settings.base_url.rstrip("/")
        if base and not base.endswith("/v1"):
            base += "/v1"
        self._client = openai.AsyncOpenAI(api_key=key, base_url=base or None, max_retries=0)
        self.transient = (openai.APIConnectionError,)

    async def _call(self, prompt: str, system: str) -> str:
        response = await self._client.chat.completions.create(
            model=self.model,
            max_completion_tokens=self.settings.max_tokens,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
        )
        if not response.choices:
            return ""
        return str(response.choices[0].message.content or "")


def _transport_errors() -> list[type[BaseException]]:
    import importlib

    found: list[type[BaseException]] = [ConnectionError]
    for name in ("httpx2", "httpx", "aiohttp"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attr in ("TransportError", "ClientConnectionError"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return found


API_BRAINS: t.Final[t.Mapping[str, type[ApiBrain]]] = {
    "gemini": GeminiBrain,
    "anthropic": AnthropicBrain,
    "openai": OpenAIBrain,
}
