"""Gemini Interactions request-side hooks (names gemini_interactions.<name>)."""

HOOKS = {}
