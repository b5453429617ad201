"""A scripted loopback model server for driving the real agent CLIs in tests.

It speaks OpenAI Responses and Chat Completions, Anthropic Messages and Gemini
``generateContent``/``streamGenerateContent`` (SSE), answers from per-test :class:`Rule` s
(text, or a call of the client's shell tool) and records every request.
"""

from __future__ import annotations

from politerm.testing.mockllm.script import Rule, Script, fake_json
from politerm.testing.mockllm.server import MockLLM, Request, free_port

__all__ = ["MockLLM", "Request", "Rule", "Script", "fake_json", "free_port"]
