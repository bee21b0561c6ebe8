"""Hooks for the anthropic codec rules."""
from __future__ import annotations

HOOKS: dict = {}
