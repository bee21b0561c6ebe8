"""Turn -> OpenAI Chat Completions: a ChatCompletion body, or the chunk stream ending in [DONE]."""

from __future__ import annotations

import time

from .turn import Reasoning, Refusal, Text, ToolCall, Turn, model_for, new_id, pieces, refusal_text, round_robin, usage_for

PROTOCOL = "openai_chat_completions"


def finish_reason(turn: Turn) -> str:
    stop = turn.stop_for(PROTOCOL)
    if stop:
        return stop
    return "tool_calls" if turn.has_tool_calls() else "stop"


def usage(turn: Turn) -> dict:
    u = usage_for(turn)
    prompt_details = {"cached_tokens": u.cached_tokens, "audio_tokens": 0}
    if u.cache_write_tokens:
        prompt_details["cache_write_tokens"] = u.cache_write_tokens
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": u.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def body(turn: Turn, request: dict) -> dict:
    text = "".join(b.text for b in turn.blocks if isinstance(b, Text))
    refusal = "".join(refusal_text(b) for b in turn.blocks if isinstance(b, Refusal))
    reasoning = "".join(b.text for b in turn.blocks if isinstance(b, Reasoning))
    calls = [b for b in turn.blocks if isinstance(b, ToolCall)]
    message: dict = {
        "role": "assistant",
        "content": text or None,
        "refusal": refusal or None,
        "annotations": [],
    }
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    return {
        "id": turn.id or new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_for(turn, request),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(turn)}],
        "usage": usage(turn),
        "service_tier": "default",
        "system_fingerprint": None,
    }


def _tool_fragments(call: ToolCall, index: int) -> list[dict]:
    first = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    return [first] + [{"index": index, "function": {"arguments": p}} for p in pieces(call.arguments, call.chunks)]


def events(turn: Turn, request: dict) -> list[tuple[str | None, str | dict]]:
    include_usage = turn.include_usage
    if include_usage is None:
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    envelope = {
        "id": turn.id or new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model_for(turn, request),
        "service_tier": "default",
        "system_fingerprint": None,
    }

    def chunk(delta: dict, finish: str | None = None) -> tuple[None, dict]:
        data = dict(envelope)
        data["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if include_usage:
            data["usage"] = None
        return (None, data)

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    tool_index = 0
    blocks = list(turn.blocks)
    i = 0
    while i < len(blocks):
        b = blocks[i]
        if isinstance(b, Text):
            out += [chunk({"content": p}) for p in pieces(b.text, b.chunks)]
        elif isinstance(b, Reasoning):
            # DeepSeek-style extension field; the official SDK keeps unknown delta keys
            out += [chunk({"reasoning_content": p}) for p in pieces(b.text, b.chunks)]
        elif isinstance(b, Refusal):
            out += [chunk({"refusal": p}) for p in pieces(refusal_text(b), None)]
        elif isinstance(b, ToolCall):
            group = []
            while i < len(blocks) and isinstance(blocks[i], ToolCall):
                group.append(_tool_fragments(blocks[i], tool_index))
                tool_index += 1
                i += 1
            fragments = round_robin(group) if turn.interleave_tools else [f for g in group for f in g]
            out += [chunk({"tool_calls": [f]}) for f in fragments]
            continue
        i += 1
    out.append(chunk({}, finish_reason(turn)))
    if include_usage:
        data = dict(envelope)
        data["choices"] = []
        data["usage"] = usage(turn)
        out.append((None, data))
    if not turn.omit_done:
        out.append((None, "[DONE]"))
    if turn.error_after is not None:
        err = {"message": "mock upstream stream error", "type": "server_error", "param": None, "code": None}
        err.update(turn.error or {})
        out = out[: turn.error_after] + [(None, {"error": err})]
    return out
