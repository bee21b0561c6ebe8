"""Turn -> OpenAI Responses: a Response body, or the typed event stream with sequence numbers."""

from __future__ import annotations

import time

from .turn import (
    Reasoning,
    RedactedReasoning,
    Refusal,
    Text,
    ToolCall,
    round_robin,
    Turn,
    model_for,
    new_id,
    pieces,
    refusal_text,
    usage_for,
)

PROTOCOL = "openai_responses"

# ResponseError.code is an enum; anything else becomes server_error
ERROR_CODES = {
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "misalignment_policy_violation", "vector_store_timeout", "invalid_image", "invalid_image_format",
    "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
    "unsupported_image_media_type", "empty_image_file", "failed_to_download_image", "image_file_not_found",
}


def status(turn: Turn) -> tuple[str, dict | None]:
    """(status, incomplete_details) from the Responses stop value."""
    stop = turn.stop_for(PROTOCOL) or "completed"
    if stop.startswith("incomplete"):
        reason = stop.partition(":")[2] or "max_output_tokens"
        return "incomplete", {"reason": reason}
    return stop, None


def usage(turn: Turn) -> dict:
    u = usage_for(turn)
    details = {"cached_tokens": u.cached_tokens, "cache_write_tokens": u.cache_write_tokens}
    if u.cache_write_long_tokens is not None:
        details["cache_write_tokens_details"] = {"ttl_30m_tokens": u.cache_write_tokens - u.cache_write_long_tokens,
                                                 "ttl_12h_tokens": u.cache_write_long_tokens}
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": details,
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def _error(turn: Turn) -> dict:
    err = turn.error or {}
    code = err.get("code") if err.get("code") in ERROR_CODES else "server_error"
    return {"code": code, "message": err.get("message") or "mock upstream error"}


def _tools(request: dict) -> list:
    tools = []
    for tool in request.get("tools") or []:
        tool = dict(tool)
        if tool.get("type") == "function":
            tool.setdefault("parameters", None)
            tool.setdefault("strict", True)
        tools.append(tool)
    return tools


def envelope(turn: Turn, request: dict, rid: str, created: int) -> dict:
    """The Response snapshot fields that do not change during a stream."""
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "completed_at": None,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "model": model_for(turn, request),
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": _tools(request),
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation", "disabled"),
        "usage": None,
        "user": None,
        "metadata": request.get("metadata") or {},
        "presence_penalty": request.get("presence_penalty", 0.0),
        "frequency_penalty": request.get("frequency_penalty", 0.0),
        "top_logprobs": request.get("top_logprobs", 0),
        "safety_identifier": request.get("safety_identifier"),
        "prompt_cache_key": request.get("prompt_cache_key"),
    }


def _completed_at(status: str) -> int | None:
    return int(time.time()) if status == "completed" else None


def _plan(turn: Turn, rid: str) -> list[dict]:
    """Group blocks into output items: consecutive Text/Refusal blocks share one message item."""
    k = rid.removeprefix("resp_")
    items: list[dict] = []
    for b in turn.blocks:
        if isinstance(b, (Text, Refusal)):
            if not items or items[-1]["kind"] != "message":
                items.append({"kind": "message", "parts": [], "id": f"msg_{k}_{len(items)}"})
            items[-1]["parts"].append(b)
        elif isinstance(b, (Reasoning, RedactedReasoning)):
            items.append({"kind": "reasoning", "block": b, "id": f"rs_{k}_{len(items)}"})
        elif isinstance(b, ToolCall):
            items.append({"kind": "function_call", "block": b, "id": f"fc_{b.id}"})
    return items


def _part(b) -> dict:
    if isinstance(b, Text):
        return {"type": "output_text", "text": b.text, "annotations": [], "logprobs": []}
    return {"type": "refusal", "refusal": refusal_text(b)}


def _final(item: dict) -> dict:
    if item["kind"] == "message":
        return {
            "id": item["id"],
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [_part(p) for p in item["parts"]],
        }
    b = item["block"]
    if item["kind"] == "function_call":
        if b.custom:
            out = {"id": item["id"], "type": "custom_tool_call", "status": "completed", "call_id": b.id,
                   "name": b.name, "input": b.arguments}
        else:
            out = {"id": item["id"], "type": "function_call", "status": "completed", "arguments": b.arguments,
                   "call_id": b.id, "name": b.name}
        if b.namespace is not None:
            out["namespace"] = b.namespace
        return out
    if isinstance(b, RedactedReasoning):
        return {"id": item["id"], "type": "reasoning", "summary": [], "encrypted_content": b.data}
    out: dict = {"id": item["id"], "type": "reasoning"}
    if b.summary:
        out["summary"] = [{"type": "summary_text", "text": b.text}]
    else:
        out["summary"] = []
        out["content"] = [{"type": "reasoning_text", "text": b.text}]
    if b.encrypted_content is not None:
        out["encrypted_content"] = b.encrypted_content
    return out


def body(turn: Turn, request: dict) -> dict:
    rid = turn.id or new_id("resp_")
    resp = envelope(turn, request, rid, int(time.time()))
    resp["output"] = [_final(item) for item in _plan(turn, rid)]
    resp["status"], resp["incomplete_details"] = status(turn)
    resp["completed_at"] = _completed_at(resp["status"])
    if resp["status"] == "failed":
        resp["error"] = _error(turn)
    resp["usage"] = usage(turn)
    return resp


def _item_events(item: dict, index: int) -> list[tuple[str, dict]]:
    """The events of one output item, from output_item.added to output_item.done."""
    iid = item["id"]
    at = {"item_id": iid, "output_index": index}
    final = _final(item)
    ev: list[tuple[str, dict]] = []
    if item["kind"] == "message":
        ev.append(("response.output_item.added", {"output_index": index, "item": {
            "id": iid, "type": "message", "role": "assistant", "status": "in_progress", "content": []}}))
        for c, b in enumerate(item["parts"]):
            pat = {**at, "content_index": c}
            if isinstance(b, Text):
                ev.append(("response.content_part.added", {**pat, "part": {
                    "type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
                for p in pieces(b.text, b.chunks):
                    ev.append(("response.output_text.delta", {**pat, "delta": p, "logprobs": []}))
                ev.append(("response.output_text.done", {**pat, "text": b.text, "logprobs": []}))
            else:
                ev.append(("response.content_part.added", {**pat, "part": {"type": "refusal", "refusal": ""}}))
                for p in pieces(refusal_text(b), None):
                    ev.append(("response.refusal.delta", {**pat, "delta": p}))
                ev.append(("response.refusal.done", {**pat, "refusal": refusal_text(b)}))
            ev.append(("response.content_part.done", {**pat, "part": _part(b)}))
    elif item["kind"] == "function_call" and item["block"].custom:
        b = item["block"]
        added = {k: v for k, v in final.items() if k != "input"}
        ev.append(("response.output_item.added", {"output_index": index, "item": {
            **added, "status": "in_progress", "input": ""}}))
        for p in pieces(b.arguments, b.chunks):
            ev.append(("response.custom_tool_call_input.delta", {**at, "delta": p}))
        ev.append(("response.custom_tool_call_input.done", {**at, "input": b.arguments}))
    elif item["kind"] == "function_call":
        b = item["block"]
        added = {k: v for k, v in final.items() if k != "arguments"}
        ev.append(("response.output_item.added", {"output_index": index, "item": {
            **added, "status": "in_progress", "arguments": ""}}))
        for p in pieces(b.arguments, b.chunks):
            ev.append(("response.function_call_arguments.delta", {**at, "delta": p}))
        ev.append(("response.function_call_arguments.done", {**at, "arguments": b.arguments}))
    else:
        b = item["block"]
        ev.append(("response.output_item.added", {"output_index": index, "item": {
            "id": iid, "type": "reasoning", "summary": []}}))
        if isinstance(b, Reasoning) and b.summary:
            sat = {**at, "summary_index": 0}
            ev.append(("response.reasoning_summary_part.added", {**sat, "part": {"type": "summary_text", "text": ""}}))
            for p in pieces(b.text, b.chunks):
                ev.append(("response.reasoning_summary_text.delta", {**sat, "delta": p}))
            ev.append(("response.reasoning_summary_text.done", {**sat, "text": b.text}))
            ev.append(("response.reasoning_summary_part.done", {**sat, "part": {"type": "summary_text", "text": b.text}}))
        elif isinstance(b, Reasoning):
            cat = {**at, "content_index": 0}
            ev.append(("response.content_part.added", {**cat, "part": {"type": "reasoning_text", "text": ""}}))
            for p in pieces(b.text, b.chunks):
                ev.append(("response.reasoning_text.delta", {**cat, "delta": p}))
            ev.append(("response.reasoning_text.done", {**cat, "text": b.text}))
            ev.append(("response.content_part.done", {**cat, "part": {"type": "reasoning_text", "text": b.text}}))
    ev.append(("response.output_item.done", {"output_index": index, "item": final}))
    return ev


def events(turn: Turn, request: dict) -> list[tuple[str, dict]]:
    rid = turn.id or new_id("resp_")
    env = envelope(turn, request, rid, int(time.time()))
    items = _plan(turn, rid)
    body_events: list[tuple[str, dict]] = []
    i = 0
    while i < len(items):
        if turn.interleave_tools and items[i]["kind"] == "function_call":
            group = []
            while i < len(items) and items[i]["kind"] == "function_call":
                group.append(_item_events(items[i], i))
                i += 1
            body_events += round_robin(group)
            continue
        body_events += _item_events(items[i], i)
        i += 1

    final_status, incomplete = status(turn)
    terminal = dict(env, status=final_status, incomplete_details=incomplete, usage=usage(turn),
                    output=[_final(item) for item in items], completed_at=_completed_at(final_status))
    if final_status == "failed":
        terminal["error"] = _error(turn)
    kind = {"completed": "response.completed", "incomplete": "response.incomplete",
            "failed": "response.failed"}.get(final_status, "response.completed")
    out = [("response.created", {"response": dict(env)}), ("response.in_progress", {"response": dict(env)})]
    out += body_events
    out.append((kind, {"response": terminal}))

    if turn.error_after is not None:
        out = out[: turn.error_after]
        err = turn.error or {}
        done = [d["item"] for t, d in out if t == "response.output_item.done"]
        out.append(("error", {"code": err.get("code", "server_error"), "message": err.get("message") or
                              "mock upstream stream error", "param": err.get("param")}))
        failed = dict(env, status="failed", output=done, error=_error(turn))
        out.append(("response.failed", {"response": failed}))
    return [(t, {"type": t, **d, "sequence_number": n}) for n, (t, d) in enumerate(out)]
