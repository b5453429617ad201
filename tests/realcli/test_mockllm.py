"""The mock model server on its own: each wire format, tool calls, side requests, the key."""

from __future__ import annotations

import json
import typing as t
import urllib.error
import urllib.request

import pytest

from politerm.testing.mockllm import MockLLM, Rule


@pytest.fixture
def mock() -> t.Iterator[MockLLM]:
    with MockLLM(
        [
            Rule(r"tool", "Calling.", command="echo hi", after="Done it."),
            Rule(r"hey (?P<who>\w+)", "Hi {who}."),
        ]
    ) as m:
        yield m


def post(m: MockLLM, path: str, body: dict[str, t.Any], key: str | None = None) -> str:
    req = urllib.request.Request(
        m.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "x-api-key": key or m.token},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.read().decode())


def sse(text: str) -> list[dict[str, t.Any]]:
    return [
        json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def test_anthropic_text_tool_call_and_result(mock: MockLLM) -> None:
    tools = [{"name": "Bash"}]
    out = sse(
        post(
            mock,
            "/v1/messages?beta=true",
            {"stream": True, "tools": tools, "messages": [{"role": "user", "content": "hey Bob"}]},
        )
    )
    text = "".join(e["delta"].get("text", "") for e in out if e["type"] == "content_block_delta")
    assert text == "Hi Bob." and out[-1]["type"] == "message_stop"
    messages: list[dict[str, t.Any]] = [{"role": "user", "content": "tool"}]
    body = {"stream": True, "tools": tools, "messages": messages}
    out = sse(post(mock, "/v1/messages", body))
    start = [e for e in out if e["type"] == "content_block_start"][-1]["content_block"]
    assert start["name"] == "Bash"
    delta = next(e for e in out if e.get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(delta["delta"]["partial_json"])["command"] == "echo hi"
    result = [{"type": "tool_result", "tool_use_id": start["id"], "content": ""}]
    messages += [{"role": "assistant", "content": []}, {"role": "user", "content": result}]
    out = sse(post(mock, "/v1/messages", body))
    assert "Done it." in json.dumps(out)
    assert [r.tool_result for r in mock.requests()] == [False, False, True]


def test_side_requests_get_canned_answers(mock: MockLLM) -> None:
    schema = {"type": "object", "properties": {"complexity_score": {"type": "integer"}}}
    body = {
        "contents": [{"role": "user", "parts": [{"text": "tool"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }
    out = json.loads(post(mock, "/v1beta/models/m:generateContent", body))
    assert json.loads(out["candidates"][0]["content"]["parts"][0]["text"]) == {
        "complexity_score": 1
    }
    title = {"type": "object", "properties": {"title": {"type": "string"}}}
    out = json.loads(
        post(
            mock,
            "/v1/responses",
            {
                "input": "tool",
                "stream": False,
                "text": {"format": {"type": "json_schema", "schema": title}},
            },
        )
    )
    assert json.loads(out["output"][0]["content"][0]["text"]) == {"title": "Mock task"}
    assert mock.requests() == [] and len(mock.requests(side=True)) == 2


def test_chat_tool_call_and_aider_bash_block(mock: MockLLM) -> None:
    msgs = [{"role": "user", "content": "tool"}]
    tools = [{"type": "function", "function": {"name": "bash"}}]
    out = sse(
        post(mock, "/v1/chat/completions", {"stream": True, "messages": msgs, "tools": tools})
    )
    call = next(
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in out
        if "tool_calls" in c["choices"][0]["delta"]
    )
    assert call["function"]["name"] == "bash"
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"
    out = sse(post(mock, "/v1/chat/completions", {"stream": True, "messages": msgs}))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in out)
    assert text == "Calling.\n\n```bash\necho hi\n```\n"


def test_a_wrong_key_is_refused(mock: MockLLM) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        post(mock, "/v1/messages", {"messages": []}, key="sk-wrong")
    assert err.value.code == 401
