"""Hooks for the chat codec rules."""
from __future__ import annotations

HOOKS: dict = {}
