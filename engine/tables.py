"""Value tables (stop reasons, roles, tool_choice, error types): YAML maps, total over their source enum."""
from __future__ import annotations

from .template import _MISS


class Table:
    __slots__ = ("name", "source", "map", "default", "where")

    def __init__(self, name, source, mapping, default=_MISS, where=""):
        self.name, self.source, self.default, self.where = name, source, default, where
        # YAML may read numeric keys (HTTP statuses) as ints; callers may pass either.
        self.map = {str(k): v for k, v in mapping.items()}

    def lookup(self, key):
        hit = self.map.get(key if isinstance(key, str) else ("true" if key is True else "false" if key is False else str(key)), _MISS)
        return self.default if hit is _MISS else hit

    def __getitem__(self, key):
        hit = self.lookup(key)
        if hit is _MISS:
            raise KeyError(key)
        return hit

    def __repr__(self):
        return f"Table({self.name!r}, {self.source!r}, {self.map!r})"
