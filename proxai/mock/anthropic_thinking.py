"""Anthropic's rule for thinking in a tool loop, as the mock enforces it.

With thinking enabled, the assistant turn that a request's tool results answer must carry
the thinking blocks the model wrote before those tool calls, unchanged (the signature
covers the exact thinking text); otherwise Anthropic answers 400. The mock remembers the
thinking it sent with each tool call and holds the next request to it. Only `enabled`
thinking is held to it, the mode Anthropic documents the rule for: with `adaptive` the
model may not think at all, and clients that work against Anthropic (Claude Code) send
such tool loops without the thinking."""

from __future__ import annotations

from .turn import Reasoning, RedactedReasoning, ToolCall, Turn

# Anthropic's own wording for the missing block.
MISSING = ("messages.{at}.content: When `thinking` is enabled, a final `assistant` message must start with a "
           "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
           "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`.")
INVALID = "messages.{at}.content: Invalid `signature` in `thinking` block"


def thinking_on(request: dict) -> bool:
    thinking = request.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _block(b) -> dict:
    if isinstance(b, RedactedReasoning):
        return {"type": "redacted_thinking", "data": b.data}
    return {"type": "thinking", "thinking": b.text, "signature": b.signature or ""}


class ThinkingLedger:
    """The thinking blocks sent before each tool call, by tool_use id."""

    def __init__(self) -> None:
        self.before_call: dict[str, list[dict]] = {}

    def clear(self) -> None:
        self.before_call.clear()

    def record(self, turn: Turn, request: dict) -> None:
        if not thinking_on(request):
            return
        thinking: list[dict] = []
        for b in turn.blocks:
            if isinstance(b, (Reasoning, RedactedReasoning)):
                thinking.append(_block(b))
            elif isinstance(b, ToolCall) and thinking and b.id:
                self.before_call[b.id] = list(thinking)

    def check(self, request: dict) -> str | None:
        """Anthropic's error message when the request breaks the rule, else None."""
        messages = request.get("messages")
        if not thinking_on(request) or not isinstance(messages, list) or len(messages) < 2:
            return None
        answer, turn = messages[-1], messages[-2]
        if not (isinstance(answer, dict) and isinstance(turn, dict) and turn.get("role") == "assistant"):
            return None
        results = {b.get("tool_use_id") for b in _blocks(answer) if b.get("type") == "tool_result"}
        at = len(messages) - 2
        blocks = _blocks(turn)
        for i, block in enumerate(blocks):
            if block.get("type") != "tool_use" or block.get("id") not in results:
                continue
            wanted = self.before_call.get(block.get("id"))
            if not wanted:
                continue
            sent = [_fields(b) for b in blocks[:i] if b.get("type") in ("thinking", "redacted_thinking")]
            if not sent:
                return MISSING.format(at=at)
            if any(w not in sent for w in wanted):
                return INVALID.format(at=at)
        return None


def _fields(block: dict) -> dict:
    keys = ("type", "thinking", "signature") if block.get("type") == "thinking" else ("type", "data")
    return {k: block.get(k) for k in keys}


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
