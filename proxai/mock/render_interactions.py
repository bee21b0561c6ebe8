"""Turn -> Google's Interactions API: the Interaction resource, or its SSE events
(`event: <event_type>` + a JSON `data` line, each with an `event_id`, no [DONE]).

The steps are the turn's blocks in order: a thought (summary text and its signature), a
model_output per text or image, a function_call per tool call. A signature the turn puts on a
text or a call (Gemini's per-part thoughtSignature) is a thought step of its own before it, as
the Interactions API carries signatures on thought steps only. Usage: total_input_tokens
includes the cached tokens (total_cached_tokens), total_output_tokens excludes the thought
tokens (total_thought_tokens), as generateContent counts them. Everything rendered is checked
against the SDK's types (interactions_schema)."""

from __future__ import annotations

import json
import time

from . import interactions_schema
from .replies import interactions_error as error_body  # noqa: F401  (the mock's routes use it from here)
from .turn import Image, Reasoning, Refusal, Text, ToolCall, Turn, model_for, new_id, pieces, refusal_text, usage_for

PROTOCOL = "gemini_interactions"
OBJECT = "interaction"


def interaction_id() -> str:
    return new_id("v1_")


def timestamp(at: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at if at is not None else time.time()))


def status(turn: Turn) -> str:
    """A turn of function calls waits for their results (requires_action); the stop may name
    another status (incomplete at the output limit, failed ...)."""
    stop = turn.stop_for(PROTOCOL)
    if stop:
        return stop
    return "requires_action" if turn.has_tool_calls() else "completed"


def usage(turn: Turn) -> dict:
    u = usage_for(turn)
    return {
        "total_input_tokens": u.input_tokens,
        "total_output_tokens": max(0, u.output_tokens - u.reasoning_tokens),
        "total_thought_tokens": u.reasoning_tokens,
        "total_cached_tokens": u.cached_tokens,
        "total_tool_use_tokens": 0,
        "total_tokens": u.input_tokens + u.output_tokens,
        "input_tokens_by_modality": [{"modality": "text", "tokens": u.input_tokens}],
    }


def shows_summaries(request: dict) -> bool:
    config = request.get("generation_config") if isinstance(request.get("generation_config"), dict) else {}
    return config.get("thinking_summaries") != "none"


def _steps(turn: Turn) -> list[tuple[str, object]]:
    """(kind, block) per output step: thought, text, image, call, or signature (a bare thought)."""
    out: list[tuple[str, object]] = []
    for b in turn.blocks:
        if isinstance(b, Reasoning):
            out.append(("thought", b))
        elif isinstance(b, (Text, ToolCall)):
            if b.thought_signature:
                out.append(("signature", b.thought_signature))
            out.append(("text" if isinstance(b, Text) else "call", b))
        elif isinstance(b, Refusal):
            out.append(("text", Text(refusal_text(b))))
        elif isinstance(b, Image):
            out.append(("image", b))
        # Redacted reasoning is Anthropic's: the Interactions API has none.
    return out


def _step(kind: str, b, request: dict) -> dict:
    if kind == "thought":
        step: dict = {"type": "thought"}
        if b.signature:
            step["signature"] = b.signature
        if shows_summaries(request) and b.text:
            step["summary"] = [{"type": "text", "text": b.text}]
        return step
    if kind == "signature":
        return {"type": "thought", "signature": b}
    if kind == "text":
        return {"type": "model_output", "content": [{"type": "text", "text": b.text}]}
    if kind == "image":
        return {"type": "model_output", "content": [{"type": "image", "data": b.data, "mime_type": b.mime_type}]}
    return {"type": "function_call", "id": b.id, "name": b.name, "arguments": json.loads(b.arguments or "{}")}


def steps(turn: Turn, request: dict) -> list[dict]:
    return [_step(kind, b, request) for kind, b in _steps(turn)]


def body(turn: Turn, request: dict) -> dict:
    now = timestamp()
    out = {
        "id": turn.id or interaction_id(),
        "status": status(turn),
        "model": model_for(turn, request),
        "created": now,
        "updated": now,
        "steps": steps(turn, request),
        "usage": usage(turn),
    }
    if isinstance(request.get("previous_interaction_id"), str):
        out["previous_interaction_id"] = request["previous_interaction_id"]
    interactions_schema.assert_interaction(out)
    return out


def _step_events(kind: str, b, request: dict) -> tuple[dict, list[dict]]:
    """(the step.start step, its deltas)."""
    if kind == "thought":
        deltas = []
        if shows_summaries(request):
            deltas = [{"type": "thought_summary", "content": {"type": "text", "text": p}} for p in pieces(b.text, b.chunks)]
        if b.signature:
            deltas.append({"type": "thought_signature", "signature": b.signature})
        return {"type": "thought"}, deltas
    if kind == "signature":
        return {"type": "thought"}, [{"type": "thought_signature", "signature": b}]
    if kind == "text":
        return {"type": "model_output", "content": []}, [{"type": "text", "text": p} for p in pieces(b.text, b.chunks)]
    if kind == "image":
        return {"type": "model_output", "content": []}, [{"type": "image", "data": b.data, "mime_type": b.mime_type}]
    start = {"type": "function_call", "id": b.id, "name": b.name, "arguments": {}}
    return start, [{"type": "arguments_delta", "arguments": p} for p in pieces(b.arguments, b.chunks)]


def events(turn: Turn, request: dict) -> list[tuple[str, dict]]:
    """interaction.created, step.start / step.delta... / step.stop per step, then
    interaction.completed with the final status and usage (also for requires_action and
    incomplete). A turn with error_after ends with an `error` event after that many events."""
    ident = turn.id or interaction_id()
    model = model_for(turn, request)
    created = timestamp()
    head = {"id": ident, "model": model, "object": OBJECT, "created": created}
    out: list[dict] = [{"event_type": "interaction.created", "interaction": {**head, "status": "in_progress"}}]
    for index, (kind, b) in enumerate(_steps(turn)):
        start, deltas = _step_events(kind, b, request)
        out.append({"event_type": "step.start", "index": index, "step": start})
        out += [{"event_type": "step.delta", "index": index, "delta": d} for d in deltas]
        out.append({"event_type": "step.stop", "index": index})
    final = {**head, "status": status(turn), "updated": timestamp(), "usage": usage(turn)}
    out.append({"event_type": "interaction.completed", "interaction": final})
    if turn.error_after is not None:
        error = {"code": "api_error", "message": "The model is overloaded. Please try again later."}
        error.update(turn.error or {})
        out = out[: turn.error_after] + [{"event_type": "error", "error": error}]
    return _stamped(out)


def started(resource: dict) -> dict:
    """A background run's first answer: the interaction, in progress, with no steps yet."""
    out = {k: resource[k] for k in ("id", "model", "created", "updated", "previous_interaction_id") if k in resource}
    out["status"] = "in_progress"
    interactions_schema.assert_interaction(out)
    return out


def replay(resource: dict) -> list[tuple[str, dict]]:
    """The events of a stored interaction that was not streamed (a GET with stream=true):
    each step whole in its step.start."""
    head = {k: resource[k] for k in ("id", "model", "created") if k in resource}
    head["object"] = OBJECT
    out: list[dict] = [{"event_type": "interaction.created", "interaction": {**head, "status": "in_progress"}}]
    for index, step in enumerate(resource.get("steps") or []):
        out += [{"event_type": "step.start", "index": index, "step": step}, {"event_type": "step.stop", "index": index}]
    final = {**head, "status": resource["status"], "updated": resource.get("updated", timestamp())}
    if "usage" in resource:
        final["usage"] = resource["usage"]
    out.append({"event_type": "interaction.completed", "interaction": final})
    return _stamped(out)


def _stamped(out: list[dict]) -> list[tuple[str, dict]]:
    stamped = []
    for n, event in enumerate(out, 1):
        event = {**event, "event_id": f"evt_{n}"}
        interactions_schema.assert_event(event)
        stamped.append((event["event_type"], event))
    return stamped
