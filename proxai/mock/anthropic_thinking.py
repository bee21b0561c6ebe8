"""Anthropic's thinking rules, as the mock enforces them (400 invalid_request_error with
Anthropic's wording).

* With thinking on (`enabled` or `adaptive`; Anthropic states the round-trip rules for
  both), the tool-use turn a request continues must start with a thinking or
  redacted_thinking block: a tool loop is one assistant turn, thinking happens at its
  start, and the signed block must come back with the tool results. The mock remembers
  the thinking it sent before each tool call and holds the next requests to it,
  unchanged (the signature covers the exact text). A call the mock sent without thinking
  (with `adaptive` the model may not think; a scripted reply may have none) owes none.
  A call the mock never sent (a history from another provider) owes a block, as it
  would on Anthropic.
* A replayed thinking block needs its signature.
* `enabled` thinking needs `budget_tokens` of at least 1024 and below `max_tokens`
  (unless the interleaved-thinking beta is on, where the budget may exceed it)."""

from __future__ import annotations

from .turn import Reasoning, RedactedReasoning, ToolCall, Turn

DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
# Anthropic's own wording (its typo "preceeding" included).
EXPECTED = ("messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding "
            "the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
            "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at " + DOCS)
INVALID = "messages.{at}.content.{index}: Invalid `signature` in `thinking` block"
NO_SIGNATURE = "messages.{at}.content.{index}.thinking.signature: Field required"
NO_BUDGET = "thinking.enabled.budget_tokens: Field required"
SMALL_BUDGET = "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
BUDGET_OVER_MAX = ("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
                   + DOCS + "#max-tokens-and-context-window-size")
MIN_BUDGET = 1024
THINKING = ("thinking", "redacted_thinking")
INTERLEAVED_BETA = "interleaved-thinking"


def thinking_on(request: dict) -> bool:
    thinking = request.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _block(b) -> dict:
    if isinstance(b, RedactedReasoning):
        return {"type": "redacted_thinking", "data": b.data}
    return {"type": "thinking", "thinking": b.text, "signature": b.signature or ""}


class ThinkingLedger:
    """The thinking blocks sent before each tool call, by tool_use id (an empty list:
    the call was sent with thinking on but none before it)."""

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
            elif isinstance(b, ToolCall) and b.id:
                self.before_call[b.id] = list(thinking)

    def check(self, request: dict, headers: dict | None = None) -> str | None:
        """Anthropic's error message when the request breaks a thinking rule, else None."""
        messages = request.get("messages")
        messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        for at, msg in enumerate(messages):
            if msg.get("role") != "assistant":
                continue
            for index, block in enumerate(_blocks(msg)):
                if block.get("type") == "thinking" and "signature" not in block:
                    return NO_SIGNATURE.format(at=at, index=index)
        if not thinking_on(request):
            return None
        refused = self._budget(request, headers or {})
        if refused:
            return refused
        turn = _turn_in_progress(messages)
        for at in turn:
            for index, block in enumerate(_blocks(messages[at])):
                if block.get("type") == "thinking" and not block.get("signature"):
                    return INVALID.format(at=at, index=index)
        if not turn:
            return None
        first = messages[turn[0]]
        blocks = _blocks(first)
        if not blocks or blocks[0].get("type") not in THINKING:
            calls = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            if not calls or any(self.before_call.get(c) != [] for c in calls):
                found = blocks[0].get("type") if blocks else "text"
                return EXPECTED.format(at=turn[0], found=found)
        for at in turn:
            blocks = _blocks(messages[at])
            sent = [_fields(b) for b in blocks if b.get("type") in THINKING]
            for block in blocks:
                wanted = self.before_call.get(block.get("id")) if block.get("type") == "tool_use" else None
                if wanted and any(w not in sent for w in wanted):
                    return INVALID.format(at=at, index=0)
        return None

    @staticmethod
    def _budget(request: dict, headers: dict) -> str | None:
        thinking = request["thinking"]
        if thinking.get("type") != "enabled":
            return None
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int):
            return NO_BUDGET
        if budget < MIN_BUDGET:
            return SMALL_BUDGET
        max_tokens = request.get("max_tokens")
        interleaved = INTERLEAVED_BETA in str(headers.get("anthropic-beta") or "")
        if isinstance(max_tokens, int) and budget >= max_tokens and not interleaved:
            return BUDGET_OVER_MAX
        return None


def _turn_in_progress(messages: list[dict]) -> list[int]:
    """The assistant messages of the tool-use turn the request continues (after the last
    user message without a tool_result), when it ends with tool results."""
    if not messages or not _has_tool_result(messages[-1]):
        return []
    out: list[int] = []
    for at in range(len(messages) - 1, -1, -1):
        if messages[at].get("role") == "assistant":
            out.append(at)
        elif not _has_tool_result(messages[at]):
            break
    return out[::-1]


def _has_tool_result(message: dict) -> bool:
    return message.get("role") == "user" and any(b.get("type") == "tool_result" for b in _blocks(message))


def _fields(block: dict) -> dict:
    keys = ("type", "thinking", "signature") if block.get("type") == "thinking" else ("type", "data")
    return {k: block.get(k) for k in keys}


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
