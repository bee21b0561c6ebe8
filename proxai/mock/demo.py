"""The answer a mock endpoint gives when no reply was scripted: a short friendly text."""

from __future__ import annotations

from .turn import Text, Turn, Usage

NAMES = {
    "openai_chat_completions": "OpenAI Chat Completions",
    "openai_responses": "OpenAI Responses",
    "anthropic_messages": "Anthropic Messages",
}


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")
        ).strip()
    return ""


def last_user_text(protocol: str, body: dict) -> str:
    if protocol == "openai_responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        messages = [i for i in items or [] if isinstance(i, dict) and i.get("role") == "user"]
    else:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    return _text_of(messages[-1].get("content")) if messages else ""


def demo_turn(protocol: str, body: dict) -> Turn:
    said = last_user_text(protocol, body)
    text = f"Hello from the ProxAI demo {NAMES.get(protocol, protocol)} upstream!"
    text += f' You said: "{said}"' if said else " You did not say anything yet."
    words = text.split(" ")
    chunks = [w + " " for w in words[:-1]] + [words[-1]]
    return Turn([Text(text, chunks=chunks)], usage=Usage(input_tokens=max(1, len(said.split())), output_tokens=len(words)))


def token_count(protocol: str, raw: bytes) -> dict:
    """A counting endpoint's answer: one token per 4 bytes of the request body."""
    tokens = max(1, len(raw) // 4)
    if protocol == "openai_responses":
        return {"object": "response.input_tokens", "input_tokens": tokens}
    return {"input_tokens": tokens}
