"""Each API's own rate-limit and usage-limit answers (HTTP 429), with their reset headers.

A :class:`~politerm.testing.mockllm.script.Rule` with ``limit`` set answers with the error
the real API sends when a key is over its limits, so a CLI shows what it shows its users:

- Anthropic Messages: ``rate_limit_error`` with ``retry-after`` and the
  ``anthropic-ratelimit-*-reset`` headers (``usage`` adds the subscription headers
  ``anthropic-ratelimit-unified-status: rejected`` and ``…-unified-reset``);
- OpenAI Responses and Chat Completions: ``rate_limit_exceeded`` with ``retry-after`` and
  ``x-ratelimit-reset-requests`` (``usage`` answers ``usage_limit_reached`` with
  ``resets_in_seconds``/``resets_at``, what Codex shows as "You've hit your usage limit");
- Gemini: ``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` ``retryDelay``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
import typing as t

Json = dict[str, t.Any]
Kind = t.Literal["rate", "usage"]


@dataclasses.dataclass(frozen=True)
class LimitAnswer:
    """An HTTP error answer: status, JSON body, headers."""

    status: int
    body: Json
    headers: dict[str, str]


def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gemini_daily_quota() -> Json:
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": metric,
                "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": "mock-model"},
                "quotaValue": "50",
            }
        ],
    }


def limit_answer(
    api: str, reset_in: float, kind: Kind = "rate", now: float | None = None
) -> LimitAnswer:
    """The 429 answer of ``api`` for a limit that resets in ``reset_in`` seconds.

    Examples
    --------
    >>> a = limit_answer("anthropic", 30, now=0)
    >>> a.status, a.body["error"]["type"], a.headers["retry-after"]
    (429, 'rate_limit_error', '30')
    >>> limit_answer("gemini", 7.5, now=0).body["error"]["details"][0]["retryDelay"]
    '8s'
    >>> limit_answer("responses", 60, "usage", now=0).body["error"]["resets_in_seconds"]
    60
    """
    now = time.time() if now is None else now
    secs = max(0, math.ceil(reset_in))
    reset_at = now + secs
    retry = {"retry-after": str(secs)}
    if api == "anthropic":
        headers = {
            **retry,
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": _rfc3339(reset_at),
        }
        if kind == "usage":
            headers |= {
                "anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": str(int(reset_at)),
                # Which of the plan's windows ran out: Claude Code names it on screen.
                "anthropic-ratelimit-unified-representative-claim": "five_hour",
            }
        message = "This request would exceed your account's rate limit. Please try again later."
        return LimitAnswer(
            429,
            {"type": "error", "error": {"type": "rate_limit_error", "message": message}},
            headers,
        )
    if api in ("responses", "chat"):
        headers = {
            **retry,
            "x-ratelimit-limit-requests": "50",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": f"{secs}s",
        }
        if kind == "usage":
            error: Json = {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": int(reset_at),
                "resets_in_seconds": secs,
            }
        else:
            error = {
                "message": "Rate limit reached for requests on mock-model. "
                f"Please try again in {secs}s.",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        return LimitAnswer(429, {"error": error}, headers)
    if api == "gemini":
        details: list[Json] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{secs}s"}
        ]
        if kind == "usage":
            # A per-day quota: Gemini CLI takes it as terminal (no retry of its own).
            details.insert(0, _gemini_daily_quota())
        body = {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan and "
                f"billing details. Please retry in {secs}s.",
                "status": "RESOURCE_EXHAUSTED",
                "details": details,
            }
        }
        return LimitAnswer(429, body, retry)
    msg = f"no limit answer for API {api!r}"
    raise ValueError(msg)
