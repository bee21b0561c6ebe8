"""Hooks for the responses codec rules."""
from __future__ import annotations

HOOKS: dict = {}
