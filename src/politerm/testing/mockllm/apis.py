"""The four wire formats: reading a request's last user message, and writing the answer.

Each API has a ``read_*`` function (request JSON → :class:`Turn`: the last user text, whether
the newest message is a tool result, whether it is a side request) and a ``*_events``
function (an answer → the SSE events, or the JSON body when the client did not stream).
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import time
import typing as t

from politerm.testing.mockllm.script import fake_json

if t.TYPE_CHECKING:
    from collections.abc import Iterator

    from politerm.testing.mockllm.script import Answer

Json = dict[str, t.Any]
#: One server-sent event: (event name or None, data).
Event = tuple[str | None, str]

# Each client's shell tool: (name, arguments for a command).
TOOLS: dict[str, t.Callable[[str, bool], Json]] = {
    "anthropic": lambda cmd, _esc: {"command": cmd, "description": "Run a shell command"},
    "responses": lambda cmd, esc: (
        {
            "cmd": cmd,
            "sandbox_permissions": "require_escalated",
            "justification": "The test asks for an escalated command",
        }
        if esc
        else {"cmd": cmd}
    ),
    "gemini": lambda cmd, _esc: {"command": cmd},
    "chat": lambda cmd, _esc: {"command": cmd, "description": "Run a shell command"},
}
TOOL_NAMES = {
    "anthropic": "Bash",
    "responses": "exec_command",
    "gemini": "run_shell_command",
    "chat": "bash",
}
# A main chat request without tools (aider) is told apart from side requests by these.
_CHAT_SIDE = re.compile(
    r"title generator|generate a (?:short |concise )?title|thread title|conversation title|"
    r"commit message|summarize this partial conversation",
    re.IGNORECASE,
)


@dataclasses.dataclass(frozen=True)
class Turn:
    """What the mock needs from one request."""

    user_text: str
    tool_result: bool
    side: bool
    tools: tuple[str, ...] = ()
    schema: Json | None = None


def _chunks(text: str, size: int = 48) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _text_of(content: t.Any, *, kinds: tuple[str, ...] = ("text", "input_text")) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in kinds:
                parts.append(str(part.get("text", "")))
        return "\n".join(parts)
    return ""


def _sse(name: str | None, data: Json | str) -> Event:
    return (name, data if isinstance(data, str) else json.dumps(data))


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def side_text(turn: Turn) -> str:
    """The canned answer to a side request (a title, a router, a commit message)."""
    if turn.schema is not None:
        return json.dumps(fake_json(turn.schema))
    return "Mock task"


# --- Anthropic Messages -----------------------------------------------------------------


def read_anthropic(body: Json) -> Turn:
    """Claude Code: its main requests carry tools; titles and the like do not."""
    messages = body.get("messages") or []
    tool_result = False
    user_text = ""
    for i, msg in enumerate(reversed(messages)):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        has_result = isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "tool_result" for p in content
        )
        if i == 0 and has_result:
            tool_result = True
        if not has_result:
            user_text = _text_of(content)
            break
    tools = tuple(str(x.get("name", "")) for x in body.get("tools") or [])
    fmt = body.get("output_format") or {}
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    return Turn(user_text, tool_result, side=not tools, tools=tools, schema=schema)


def _anthropic_call(answer: Answer) -> tuple[str, Json] | None:
    """The tool call of an answer: a named one (an MCP tool), or the shell tool."""
    if answer.call is not None:
        return answer.call
    if answer.command is not None:
        return "Bash", TOOLS["anthropic"](answer.command, answer.escalate)
    return None


def anthropic_events(answer: Answer, model: str) -> Iterator[Event]:
    """Anthropic Messages SSE: message_start, content blocks, message_delta, message_stop."""
    mid = _id("msg")
    usage = {"input_tokens": 10, "output_tokens": 1}
    start: Json = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield _sse("message_start", {"type": "message_start", "message": start})
    index = 0
    if answer.text:
        block: Json = {"type": "text", "text": ""}
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
        for piece in _chunks(answer.text):
            delta = {"type": "text_delta", "text": piece}
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    call = _anthropic_call(answer)
    if call is not None:
        block = {"type": "tool_use", "id": _id("toolu"), "name": call[0], "input": {}}
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
        args = json.dumps(call[1])
        delta = {"type": "input_json_delta", "partial_json": args}
        yield _sse(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = "tool_use" if call is not None else "end_turn"
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": max(1, len(answer.text) // 4)},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def anthropic_json(answer: Answer, model: str) -> Json:
    """A non-streamed Anthropic message."""
    content: list[Json] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    call = _anthropic_call(answer)
    if call is not None:
        content.append({"type": "tool_use", "id": _id("toolu"), "name": call[0], "input": call[1]})
    return {
        "id": _id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if call is not None else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": max(1, len(answer.text) // 4)},
    }


# --- OpenAI Responses --------------------------------------------------------------------


def read_responses(body: Json) -> Turn:
    """Codex: the title request wants JSON (``text.format``) and has no tools."""
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    tool_result = bool(items) and str(items[-1].get("type", "")).endswith("_call_output")
    user_text = ""
    for item in reversed(items):
        if item.get("role") == "user" and item.get("type", "message") == "message":
            user_text = _text_of(item.get("content"))
            break
    tools = tuple(str(x.get("name", x.get("type", ""))) for x in body.get("tools") or [])
    fmt = (body.get("text") or {}).get("format") or {}
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else None
    return Turn(user_text, tool_result, side=schema is not None or not tools, tools=tools,
                schema=schema)  # fmt: skip


def _usage_responses(answer: Answer) -> Json:
    out = max(1, len(answer.text) // 4)
    return {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + out,
    }


def _responses_items(answer: Answer) -> list[Json]:
    items: list[Json] = []
    if answer.text:
        items.append(
            {
                "type": "message",
                "id": _id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        )
    if answer.command is not None:
        items.append(
            {
                "type": "function_call",
                "id": _id("fc"),
                "call_id": _id("call"),
                "name": "exec_command",
                "arguments": json.dumps(TOOLS["responses"](answer.command, answer.escalate)),
                "status": "completed",
            }
        )
    return items


def responses_events(answer: Answer, model: str) -> Iterator[Event]:
    """OpenAI Responses SSE: created, one output item per message or call, completed."""
    rid = _id("resp")
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model}
    seq = 0

    def ev(kind: str, **data: t.Any) -> Event:
        nonlocal seq
        seq += 1
        return _sse(kind, {"type": kind, "sequence_number": seq, **data})

    yield ev("response.created", response={**base, "status": "in_progress", "output": []})
    items = _responses_items(answer)
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            pending = {**item, "status": "in_progress", "content": []}
            yield ev("response.output_item.added", output_index=index, item=pending)
            part = {"type": "output_text", "text": "", "annotations": []}
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield ev("response.content_part.added", **at, part=part)
            for piece in _chunks(text):
                yield ev("response.output_text.delta", **at, delta=piece)
            yield ev("response.output_text.done", **at, text=text)
            yield ev("response.content_part.done", **at, part={**part, "text": text})
        else:
            yield ev("response.output_item.added", output_index=index, item=item)
        yield ev("response.output_item.done", output_index=index, item=item)
    done = {**base, "status": "completed", "output": items, "usage": _usage_responses(answer)}
    yield ev("response.completed", response=done)


def responses_json(answer: Answer, model: str) -> Json:
    """A non-streamed Responses object."""
    return {
        "id": _id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": _responses_items(answer),
        "usage": _usage_responses(answer),
    }


# --- OpenAI Chat Completions -------------------------------------------------------------


def read_chat(body: Json) -> Turn:
    """Chat Completions (opencode, aider); aider sends no tools: side requests go by prompt."""
    messages = body.get("messages") or []
    tool_result = bool(messages) and messages[-1].get("role") == "tool"
    user_text = ""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            user_text = _text_of(msg.get("content"))
            break
    tools = tuple(str((x.get("function") or {}).get("name", "")) for x in body.get("tools") or [])
    system = "\n".join(
        _text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    side = not tools and bool(_CHAT_SIDE.search(system))
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") if isinstance(fmt, dict) else None
    return Turn(user_text, tool_result, side=side, tools=tools, schema=schema)


def chat_events(answer: Answer, model: str) -> Iterator[Event]:
    """Chat Completions SSE: role, content deltas, a tool call, the finish, ``[DONE]``."""
    cid = _id("chatcmpl")
    created = int(time.time())

    def chunk(delta: Json, finish: str | None = None, **extra: t.Any) -> Event:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
        }
        return _sse(None, data)

    yield chunk({"role": "assistant", "content": ""})
    if answer.text:
        for piece in _chunks(answer.text):
            yield chunk({"content": piece})
    if answer.command is not None:
        call = {
            "index": 0,
            "id": _id("call"),
            "type": "function",
            "function": {
                "name": "bash",
                "arguments": json.dumps(TOOLS["chat"](answer.command, answer.escalate)),
            },
        }
        yield chunk({"tool_calls": [call]})
    finish = "tool_calls" if answer.command is not None else "stop"
    out = max(1, len(answer.text) // 4)
    usage = {"prompt_tokens": 10, "completion_tokens": out, "total_tokens": 10 + out}
    yield chunk({}, finish, usage=usage)
    yield _sse(None, "[DONE]")


def chat_json(answer: Answer, model: str) -> Json:
    """A non-streamed chat completion."""
    message: Json = {"role": "assistant", "content": answer.text or None}
    if answer.command is not None:
        message["tool_calls"] = [
            {
                "id": _id("call"),
                "type": "function",
                "function": {
                    "name": "bash",
                    "arguments": json.dumps(TOOLS["chat"](answer.command, answer.escalate)),
                },
            }
        ]
    out = max(1, len(answer.text) // 4)
    return {
        "id": _id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if answer.command is not None else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": out, "total_tokens": 10 + out},
    }


# --- Gemini -------------------------------------------------------------------------------


def read_gemini(body: Json, *, streaming: bool) -> Turn:
    """Gemini CLI: the router and other JSON-mode calls are non-streamed ``generateContent``."""
    contents = body.get("contents") or []
    tool_result = False
    user_text = ""
    for i, msg in enumerate(reversed(contents)):
        if msg.get("role", "user") != "user":
            continue
        parts = msg.get("parts") or []
        has_result = any(isinstance(p, dict) and "functionResponse" in p for p in parts)
        if i == 0 and has_result:
            tool_result = True
        if not has_result:
            user_text = "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
            break
    tools = tuple(
        str(decl.get("name", ""))
        for tool in body.get("tools") or []
        for decl in tool.get("functionDeclarations") or []
    )
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    json_mode = config.get("responseMimeType") == "application/json" or schema is not None
    return Turn(
        user_text,
        tool_result,
        side=json_mode or not streaming,
        tools=tools,
        schema=schema if schema is not None else ({} if json_mode else None),
    )


def _gemini_parts(answer: Answer) -> list[Json]:
    parts: list[Json] = []
    if answer.text:
        parts.append({"text": answer.text})
    if answer.command is not None:
        args = TOOLS["gemini"](answer.command, answer.escalate)
        parts.append({"functionCall": {"name": "run_shell_command", "args": args}})
    return parts


def _gemini_usage(answer: Answer) -> Json:
    out = max(1, len(answer.text) // 4)
    return {"promptTokenCount": 10, "candidatesTokenCount": out, "totalTokenCount": 10 + out}


def gemini_json(answer: Answer, model: str) -> Json:
    """A ``generateContent`` response."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": _gemini_parts(answer)},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _gemini_usage(answer),
        "modelVersion": model,
    }


def gemini_events(answer: Answer, model: str) -> Iterator[Event]:
    """``streamGenerateContent?alt=sse``: text chunks, then the call and the finish reason."""
    for piece in _chunks(answer.text) if answer.text else []:
        data = {
            "candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
            "modelVersion": model,
        }
        yield _sse(None, data)
    last: list[Json] = []
    if answer.command is not None:
        args = TOOLS["gemini"](answer.command, answer.escalate)
        last.append({"functionCall": {"name": "run_shell_command", "args": args}})
    if not last:
        last.append({"text": ""})
    final = {
        "candidates": [
            {"content": {"role": "model", "parts": last}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": _gemini_usage(answer),
        "modelVersion": model,
    }
    yield _sse(None, final)
