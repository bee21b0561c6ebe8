"""The protocol registry: the one Python module that names protocol ids.

Which protocols exist, and every fact about them, is in the rules (the folders with a
`protocol.yaml`, read by `engine.descriptors`). The ids below are only the built-in
protocols the demo mode and the mock upstreams speak; no other module compares a
protocol id (tests/test_protocol_units.py).
"""

from __future__ import annotations

from engine import descriptors as _descriptors
from engine.wire import Wire

CHAT = "openai_chat_completions"
RESPONSES = "openai_responses"
ANTHROPIC = "anthropic_messages"
GEMINI = "gemini_generate_content"
INTERACTIONS = "gemini_interactions"


def wire(rules_dir: str | None = None) -> Wire:
    """The descriptors of the built-in rules layered with `rules_dir` (no codec compiled)."""
    return _descriptors.load(rules_dir)[0]


def names(rules_dir: str | None = None) -> tuple[str, ...]:
    """Every protocol the rules describe, the built-in ones first."""
    return wire(rules_dir).names
