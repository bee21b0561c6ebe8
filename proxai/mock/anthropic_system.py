"""System messages in `messages`, refused the way Anthropic refuses them.

Anthropic takes a `role: "system"` message only on the Claude models that accept one (the
proxy's own table, rules/tables/model_features.yaml, so the proxy's choice is proven
against an upstream that enforces it), never first (the initial prompt is the
top-level `system`), only right after a user turn and before an assistant turn or at
the end of the array. The wording follows the API's 400s."""

from __future__ import annotations

import functools

import yaml

from engine.hooks.instructions import MODEL_TABLE, model_policy
from engine.ruleset import BUILTIN_RULES
from engine.tables import Table

from .replies import ANTHROPIC


@functools.lru_cache(maxsize=1)
def _tables() -> dict:
    doc = yaml.safe_load((BUILTIN_RULES / "tables" / "model_features.yaml").read_text())
    (table,) = [t for t in doc["tables"] if t["name"] == MODEL_TABLE]
    return {MODEL_TABLE: Table(MODEL_TABLE, "mock", table["map"], table.get("default"))}


def refusal(protocol: str, body: dict, any_model: bool = False) -> str | None:
    """The 400 message for a request body's misplaced system message, or None;
    `any_model`: every model takes one (where it is placed is still checked)."""
    check = CHECKS.get(protocol)
    return check(body, any_model) if check is not None else None


def _anthropic(body: dict, any_model: bool = False) -> str | None:
    messages = body.get("messages") if isinstance(body, dict) else None
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages or ()]
    for i, role in enumerate(roles):
        if role != "system":
            continue
        model = str(body.get("model") or "")
        # Other model names stand for Anthropic-compatible servers that take them.
        if not any_model and model.startswith("claude-") and model_policy(_tables(), model) != "native":
            return f"messages.{i}: role 'system' is not supported on this model"
        if i == 0:
            return f"messages.{i}: use the top-level 'system' parameter for the initial system prompt"
        if roles[i - 1] != "user":
            return f"messages.{i}: role 'system' must follow a 'user' message"
        if i + 1 < len(roles) and roles[i + 1] != "assistant":
            return f"messages.{i}: role 'system' must precede an 'assistant' message or end the array"
    return None


CHECKS = {ANTHROPIC: _anthropic}
