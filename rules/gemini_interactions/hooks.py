"""Gemini Interactions request-side hooks (names gemini_interactions.<name>).

A thought step's `signature` toward a client of this protocol carries the proxy's
continuation envelope (docs/continuation.md) for reasoning state of other providers,
either as is or base64-encoded as the service writes its own signatures."""
from __future__ import annotations

from engine.errors import InvalidRequest
from engine.hooks import continuation
from engine.hooks.gemini_client import decode_b64
from engine.hooks.instructions import folded_into

# The types of Content (content.py); a list of only these is one user turn.
CONTENT_TYPES = frozenset({"text", "image", "audio", "document", "video"})


def envelope(scope, signature=None):
    """A thought signature that carries one of our envelopes -> the envelope text; else
    None. Another signature (the service's own, for a provider of this protocol, which
    is passed through and never translated) is traced and skipped."""
    if not isinstance(signature, str) or not signature:
        return None
    if signature.startswith(continuation.PREFIX):
        return signature
    raw = decode_b64(signature)
    if raw is not None and raw.startswith(continuation.PREFIX.encode()):
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            pass
    scope.ctx.trace("foreign thought signature skipped")
    return None


def input_kind(scope, input=None):
    """What `input` is: text, content (one Content or a list of only Content), steps, or
    none; anything else is refused naming the field."""
    if input is None:
        return "none"
    if isinstance(input, str):
        return "text"
    if isinstance(input, dict):
        return "content"
    if isinstance(input, list):
        for i, item in enumerate(input):
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise InvalidRequest("each input item must be an object with a type (a Content or a Step)",
                                     param=f"input[{i}]")
        if input and all(item["type"] in CONTENT_TYPES for item in input):
            return "content"
        return "steps"
    raise InvalidRequest("input must be a string, a Content or a list of Content or Steps", param="input")


# Interactions has instructions only in system_instruction: later ones fold there, traced.
instructions_folded = folded_into("system_instruction", "Interactions")


def join_model_outputs(scope):
    """Request encode, on the provider request: adjacent model_output steps are one."""
    body = scope.cur
    steps = body.get("input") if isinstance(body, dict) else None
    if not isinstance(steps, list):
        return body
    out: list = []
    for step in steps:
        prev = out[-1] if out else None
        if isinstance(step, dict) and step.get("type") == "model_output" and isinstance(prev, dict) \
                and prev.get("type") == "model_output" and "error" not in prev:
            out[-1] = {**prev, "content": [*(prev.get("content") or ()), *(step.get("content") or ())]}
            continue
        out.append(step)
    return {**body, "input": out}


HOOKS = {
    "gemini_interactions.instructions_folded": instructions_folded,
    "gemini_interactions.join_model_outputs": join_model_outputs,
    "gemini_interactions.envelope": envelope,
    "gemini_interactions.input_kind": input_kind,
}
