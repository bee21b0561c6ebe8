"""Turn -> Anthropic Messages: a Message body, or the raw message stream event sequence."""

from __future__ import annotations

import json

from .turn import Reasoning, RedactedReasoning, Refusal, Text, ToolCall, Turn, model_for, new_id, pieces, usage_for

PROTOCOL = "anthropic_messages"


def stop_reason(turn: Turn) -> str:
    stop = turn.stop_for(PROTOCOL)
    if stop:
        return stop
    if turn.has_refusal():
        return "refusal"
    return "tool_use" if turn.has_tool_calls() else "end_turn"


def _stop_fields(turn: Turn, request: dict) -> dict:
    reason = stop_reason(turn)
    sequence = None
    if reason == "stop_sequence":
        sequence = turn.stop_sequence or next(iter(request.get("stop_sequences") or []), None)
    details = None
    if reason == "refusal":
        r = next((b for b in turn.blocks if isinstance(b, Refusal)), None)
        details = {"type": "refusal", "category": r and r.category, "explanation": r and r.explanation}
    return {"stop_reason": reason, "stop_sequence": sequence, "stop_details": details}


def usage(turn: Turn) -> dict:
    """Anthropic input_tokens excludes cache reads and writes (the canonical count includes them)."""
    u = usage_for(turn)
    out = {
        "input_tokens": max(0, u.input_tokens - u.cached_tokens - u.cache_write_tokens),
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_tokens - (u.cache_write_long_tokens or 0),
                           "ephemeral_1h_input_tokens": u.cache_write_long_tokens or 0},
        "output_tokens": u.output_tokens,
        "service_tier": "standard",
    }
    if u.reasoning_tokens:
        out["output_tokens_details"] = {"thinking_tokens": u.reasoning_tokens}
    return out


def _blocks(turn: Turn) -> list:
    """The blocks Anthropic shows: a refusal's text (if any) is an ordinary text block."""
    out = []
    for b in turn.blocks:
        if isinstance(b, Refusal):
            if b.text:
                out.append(Text(b.text))
        elif isinstance(b, (Text, Reasoning, RedactedReasoning, ToolCall)):
            out.append(b)
    return out


def _content(b) -> dict:
    if isinstance(b, Text):
        return {"type": "text", "text": b.text}
    if isinstance(b, Reasoning):
        return {"type": "thinking", "thinking": b.text, "signature": b.signature or ""}
    if isinstance(b, RedactedReasoning):
        return {"type": "redacted_thinking", "data": b.data}
    return {"type": "tool_use", "id": b.id, "name": b.name, "input": json.loads(b.arguments or "{}")}


def body(turn: Turn, request: dict) -> dict:
    return {
        "id": turn.id or new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model_for(turn, request),
        "content": [_content(b) for b in _blocks(turn)],
        **_stop_fields(turn, request),
        "usage": usage(turn),
    }


def _block_events(b, index: int) -> list[tuple[str, dict]]:
    at = {"index": index}
    if isinstance(b, Text):
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in pieces(b.text, b.chunks)]
    elif isinstance(b, Reasoning):
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(b.text, b.chunks)]
        if b.signature is not None:
            deltas.append({"type": "signature_delta", "signature": b.signature})
    elif isinstance(b, RedactedReasoning):
        start = {"type": "redacted_thinking", "data": b.data}
        deltas = []
    else:
        start = {"type": "tool_use", "id": b.id, "name": b.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(b.arguments, b.chunks)]
    ev = [("content_block_start", {**at, "content_block": start})]
    ev += [("content_block_delta", {**at, "delta": d}) for d in deltas]
    ev.append(("content_block_stop", at))
    return ev


def events(turn: Turn, request: dict) -> list[tuple[str, dict]]:
    u = usage(turn)
    start_usage = {k: v for k, v in u.items() if k != "output_tokens_details"}
    start_usage["output_tokens"] = min(1, u["output_tokens"])
    message = {
        "id": turn.id or new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model_for(turn, request),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": start_usage,
    }
    out: list[tuple[str, dict]] = [("message_start", {"message": message}), ("ping", {})]
    for index, b in enumerate(_blocks(turn)):
        out += _block_events(b, index)
    stop = _stop_fields(turn, request)
    if stop["stop_details"] is None:
        del stop["stop_details"]
    delta_usage = {
        "input_tokens": u["input_tokens"],
        "cache_creation_input_tokens": u["cache_creation_input_tokens"],
        "cache_read_input_tokens": u["cache_read_input_tokens"],
        "output_tokens": u["output_tokens"],
    }
    if "output_tokens_details" in u:
        delta_usage["output_tokens_details"] = u["output_tokens_details"]
    out.append(("message_delta", {"delta": stop, "usage": delta_usage}))
    out.append(("message_stop", {}))
    if turn.error_after is not None:
        err = {"type": "overloaded_error", "message": "Overloaded"}
        err.update(turn.error or {})
        out = out[: turn.error_after] + [("error", {"error": err})]
    return [(t, {"type": t, **d}) for t, d in out]
