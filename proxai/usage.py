"""Token counts for the request log and metrics, read from a response body or stream.

Counts are normalised to the canonical meaning: `input_tokens` is the whole
input (Anthropic's cache reads and writes included, as OpenAI counts them),
`output_tokens` the whole output (reasoning included); `cache_read_tokens` and
`cache_write_tokens` are the parts of the input read from and written to the
provider's prompt cache.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxai.errors import ANTHROPIC, CHAT, GEMINI, RESPONSES

Usage = dict[str, int]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def normalise(protocol: str, usage: Any) -> Usage | None:
    """A protocol's usage object as {input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens}; None when absent. Cache counts are part of input_tokens."""
    if not isinstance(usage, dict):
        return None
    if protocol == CHAT:
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        return {"input_tokens": _int(usage.get("prompt_tokens")), "output_tokens": _int(usage.get("completion_tokens")),
                "cache_read_tokens": _int(details.get("cached_tokens")), "cache_write_tokens": _int(details.get("cache_write_tokens"))}
    if protocol == ANTHROPIC:
        read, write = _int(usage.get("cache_read_input_tokens")), _int(usage.get("cache_creation_input_tokens"))
        return {"input_tokens": _int(usage.get("input_tokens")) + read + write, "output_tokens": _int(usage.get("output_tokens")),
                "cache_read_tokens": read, "cache_write_tokens": write}
    if protocol == GEMINI:
        # usageMetadata: promptTokenCount includes the cached tokens; thoughts are counted apart.
        return {"input_tokens": _int(usage.get("promptTokenCount")),
                "output_tokens": _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
                "cache_read_tokens": _int(usage.get("cachedContentTokenCount")), "cache_write_tokens": 0}
    if protocol == CANONICAL_IR:
        return {"input_tokens": _int(usage.get("input_tokens")), "output_tokens": _int(usage.get("output_tokens")),
                "cache_read_tokens": _int(usage.get("cached_tokens")), "cache_write_tokens": _int(usage.get("cache_write_tokens"))}
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    return {"input_tokens": _int(usage.get("input_tokens")), "output_tokens": _int(usage.get("output_tokens")),
            "cache_read_tokens": _int(details.get("cached_tokens")), "cache_write_tokens": _int(details.get("cache_write_tokens"))}


def from_body(protocol: str, body: Any) -> Usage | None:
    """Usage from a parsed (or raw JSON) non-streaming response body."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(body, dict):
        return None
    return normalise(protocol, body.get("usageMetadata" if protocol == GEMINI else "usage"))


# The engine's canonical usage (translated streams): IR names (schemas/ir.schema.json usage).
CANONICAL_IR = "ir"
CANONICAL = CANONICAL_IR
