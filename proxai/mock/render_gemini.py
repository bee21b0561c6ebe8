"""Turn -> Gemini generateContent: a GenerateContentResponse body, or the chunks of
streamGenerateContent?alt=sse (each a whole GenerateContentResponse, no event names,
no [DONE]; the last carries finishReason; usageMetadata is cumulative on every chunk)."""

from __future__ import annotations

import json
from dataclasses import replace

from .turn import Reasoning, Refusal, Text, ToolCall, Turn, model_for, new_id, pieces, usage_for

PROTOCOL = "gemini_generate_content"


def finish_reason(turn: Turn) -> str:
    """Gemini ends a turn of function calls with STOP too; a refusal is a SAFETY stop."""
    stop = turn.stop_for(PROTOCOL)
    if stop:
        return stop
    return "SAFETY" if turn.has_refusal() else "STOP"


def usage(turn: Turn, final: bool = True) -> dict:
    """promptTokenCount includes cachedContentTokenCount; thoughtsTokenCount is apart
    from candidatesTokenCount (the canonical output includes the reasoning)."""
    u = usage_for(turn)
    answer = max(0, u.output_tokens - u.reasoning_tokens)
    out = {"promptTokenCount": u.input_tokens, "totalTokenCount": u.input_tokens}
    if final:
        out["candidatesTokenCount"] = answer
        out["totalTokenCount"] = u.input_tokens + u.output_tokens
        if u.reasoning_tokens:
            out["thoughtsTokenCount"] = u.reasoning_tokens
    if u.cached_tokens:
        out["cachedContentTokenCount"] = u.cached_tokens
    out["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.input_tokens}]
    return out


def _signed(part: dict, signature: str | None) -> dict:
    return {**part, "thoughtSignature": signature} if signature else part


def _call(b: ToolCall) -> dict:
    call = {"name": b.name, "args": json.loads(b.arguments or "{}")}
    if b.id:
        call = {"id": b.id, **call}
    return _signed({"functionCall": call}, b.thought_signature)


def includes_thoughts(request: dict) -> bool:
    """Gemini returns thought parts only when generationConfig.thinkingConfig.includeThoughts
    is true (either key spelling)."""
    config = request.get("generationConfig") or request.get("generation_config") or {}
    thinking = config.get("thinkingConfig") or config.get("thinking_config") or {}
    return (thinking.get("includeThoughts") if "includeThoughts" in thinking else thinking.get("include_thoughts")) is True


def _visible(turn: Turn, request: dict) -> list:
    """The blocks Gemini shows for `request`. Without includeThoughts the thoughts are left
    out (still counted in thoughtsTokenCount), and a thought's signature moves onto the
    part that follows it, as Gemini puts it on the first part after its thinking."""
    if includes_thoughts(request):
        return list(turn.blocks)
    out, signature = [], None
    for b in turn.blocks:
        if isinstance(b, Reasoning):
            signature = signature or b.signature
            continue
        if signature and isinstance(b, Text) and not b.thought_signature:
            b = replace(b, thought_signature=signature)
            signature = None
        elif signature and isinstance(b, ToolCall) and not b.thought_signature:
            b = replace(b, thought_signature=signature)
            signature = None
        out.append(b)
    return out


def _parts(turn: Turn, request: dict) -> list[dict]:
    out = []
    for b in _visible(turn, request):
        if isinstance(b, Reasoning):
            out.append(_signed({"text": b.text, "thought": True}, b.signature))
        elif isinstance(b, Text):
            out.append(_signed({"text": b.text}, b.thought_signature))
        elif isinstance(b, ToolCall):
            out.append(_call(b))
        # A refusal is a SAFETY finish with no content; redacted reasoning is Anthropic's.
    return out


def _candidate(turn: Turn, parts: list[dict] | None, finish: str | None) -> dict:
    candidate: dict = {"index": 0}
    if parts is not None:
        candidate["content"] = {"role": "model", "parts": parts}
    if finish:
        candidate["finishReason"] = finish
        r = next((b for b in turn.blocks if isinstance(b, Refusal)), None)
        if r is not None and r.explanation:
            candidate["finishMessage"] = r.explanation
        if finish == "SAFETY":
            candidate["safetyRatings"] = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]
    return candidate


def body(turn: Turn, request: dict) -> dict:
    parts = _parts(turn, request)
    return {
        "candidates": [_candidate(turn, parts or None, finish_reason(turn))],
        "usageMetadata": usage(turn),
        "modelVersion": model_for(turn, request),
        "responseId": turn.id or new_id(""),
    }


def events(turn: Turn, request: dict) -> list[tuple[None, dict]]:
    """Text and thoughts stream in pieces, one part per chunk; all function calls come
    whole in one chunk; the last chunk carries finishReason and the final usage."""
    response_id = turn.id or new_id("")
    model = model_for(turn, request)
    chunks: list[list[dict]] = []
    calls: list[dict] = []
    for b in _visible(turn, request):
        if isinstance(b, ToolCall):
            calls.append(_call(b))
            continue
        if calls:
            chunks.append(calls)
            calls = []
        if isinstance(b, Reasoning):
            texts = pieces(b.text, b.chunks) or [""]
            for i, text in enumerate(texts):
                chunks.append([_signed({"text": text, "thought": True}, b.signature if i == len(texts) - 1 else None)])
        elif isinstance(b, Text):
            texts = pieces(b.text, b.chunks) or [""]
            for i, text in enumerate(texts):
                chunks.append([_signed({"text": text}, b.thought_signature if i == 0 else None)])
    if calls:
        chunks.append(calls)
    finish = finish_reason(turn)
    out = []
    for i, parts in enumerate(chunks):
        last = i == len(chunks) - 1
        out.append({"candidates": [_candidate(turn, parts, finish if last else None)],
                    "usageMetadata": usage(turn, final=last), "modelVersion": model, "responseId": response_id})
    if not chunks:
        out.append({"candidates": [_candidate(turn, None, finish)], "usageMetadata": usage(turn),
                    "modelVersion": model, "responseId": response_id})
    if turn.error_after is not None:
        err = {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}
        err.update(turn.error or {})
        out = out[: turn.error_after] + [{"error": err}]
    return [(None, chunk) for chunk in out]
