"""Output limits above a model's ceiling, refused the way the real APIs refuse them.

The ceilings are the proxy's own table (rules/tables/output_ceilings.yaml), so a clamp
by the proxy is proven against an upstream that would refuse the unclamped limit.
Anthropic is left out: the proxy relays Anthropic clients to Anthropic providers
unchanged, and those clients pick their limits for Anthropic's models themselves."""

from __future__ import annotations

import functools

import yaml

from engine.hooks.ceilings import TABLE, lookup
from engine.ruleset import BUILTIN_RULES

from .replies import CHAT, GEMINI, RESPONSES

# Per protocol: the output-limit fields (a path in the body), the error's wording
# and whether the field's name is the error's `param`.
FIELDS = {
    CHAT: (("max_completion_tokens",), ("max_tokens",)),
    RESPONSES: (("max_output_tokens",),),
    GEMINI: (("generationConfig", "maxOutputTokens"),),
}
MESSAGES = {
    CHAT: "{field} is too large: {value}. This model supports at most {ceiling} completion tokens, whereas you provided {value}.",
    RESPONSES: "Invalid '{field}': integer above maximum value. Expected a value <= {ceiling}, but got {value} instead.",
    GEMINI: ("Unable to submit request because it has a maxOutputTokens value of {value} but the supported range is "
             "from 1 (inclusive) to {limit} (exclusive). Update the value and try again."),
}
CODES = {CHAT: "invalid_value", RESPONSES: "integer_above_max_value"}


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    doc = yaml.safe_load((BUILTIN_RULES / "tables" / "output_ceilings.yaml").read_text())
    (table,) = [t for t in doc["tables"] if t["name"] == TABLE]
    return table["map"]


def ceiling(model) -> int | None:
    return lookup(_table(), model)


def refusal(protocol: str, body: dict) -> tuple[str, str | None, str | None] | None:
    """(message, param, code) when `body` asks its model for more output tokens than
    the model's ceiling, else None."""
    paths = FIELDS.get(protocol)
    limit = ceiling(body.get("model")) if paths else None
    if not limit:
        return None
    for path in paths:
        value = body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            message = MESSAGES[protocol].format(field=path[-1], value=value, ceiling=limit, limit=limit + 1)
            return message, path[-1] if protocol in CODES else None, CODES.get(protocol)
    return None
