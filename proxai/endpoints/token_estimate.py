"""A local estimate of a request's input tokens, for providers with no counting endpoint.

No tokenizer is shipped: models differ, and a count the provider would bill
differently is an estimate however it is made. The rule is simple and
documented instead, and works on a request of any protocol (a Gemini request is
read with its fields given these names):

* text: every string in the system prompt / instructions, the messages or
  input items (text, tool arguments, tool results) and the tool definitions
  (names, descriptions, JSON schemas) counts one token per 4 characters, rounded up,
  string by string;
* an image or file part counts a flat 1,600 tokens (about what a 1,000 x 1,000 image costs
  at Anthropic; the proxy does not decode media to measure it);
* each message or input item adds 4 tokens of framing, each tool 8.

Identifiers, signatures, encrypted reasoning, base64 data and media types count nothing.
"""

from __future__ import annotations

from typing import Any

CHARS_PER_TOKEN = 4
MEDIA_TOKENS = 1600
PER_MESSAGE = 4
PER_TOOL = 8

# Request fields that carry input, by protocol.
_PROMPT_FIELDS = ("system", "instructions")
_MESSAGE_FIELDS = ("messages", "input")
_TOOL_FIELDS = ("tools", "functions")

_MEDIA_TYPES = frozenset({"image", "document", "input_image", "input_file", "image_url", "input_audio", "file"})
# Keys whose string values are not text the model reads as such.
_OPAQUE_KEYS = frozenset({
    "type", "id", "call_id", "tool_use_id", "tool_call_id", "signature", "encrypted_content", "data",
    "media_type", "role", "status", "cache_control", "file_id", "image_url", "url", "detail", "format",
})


def estimate(body: dict[str, Any]) -> int:
    total = 0
    for name in _PROMPT_FIELDS:
        total += _walk(body.get(name))
    for name in _MESSAGE_FIELDS:
        value = body.get(name)
        if isinstance(value, list):
            total += PER_MESSAGE * len(value) + _walk(value)
        else:
            total += _walk(value)
    for name in _TOOL_FIELDS:
        value = body.get(name)
        if isinstance(value, list):
            total += PER_TOOL * len(value) + _walk(value, schema=True)
    return total


def count(value: Any) -> int:
    """Tokens of one part of a request (a tool result's content, a call's arguments) by
    the same rule, without the framing of a message."""
    return _walk(value)


def _text_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def _walk(node: Any, schema: bool = False) -> int:
    """Tokens of a JSON value. In a tool's schema every key is text too (property names)."""
    if isinstance(node, str):
        return _text_tokens(node)
    if isinstance(node, list):
        return sum(_walk(item, schema) for item in node)
    if not isinstance(node, dict):
        return 0
    if not schema and node.get("type") in _MEDIA_TYPES:
        return MEDIA_TOKENS
    total = 0
    for key, value in node.items():
        if schema:
            total += _text_tokens(key) + _walk(value, schema)
        elif key not in _OPAQUE_KEYS:
            total += _walk(value)
    return total
