"""A protocol's descriptor: `rules/<protocol>/protocol.yaml`.

Everything the server must know about a wire protocol that is not one codec
direction (its family, client endpoints, headers, upstream URLs, HTTP error bodies,
where usage and the stop reason sit) is data in that file. The server reads it only
through the engine (`Engine.protocols`), so a protocol is one rules folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Descriptor:
    """One protocol's descriptor after layering (an override's keys merged over the
    built-in file's, section by section)."""
    name: str
    doc: Any          # the layered yamlsrc.Located document
    file: str         # the file that last contributed to it

    def section(self, key: str) -> dict:
        value = self.doc.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def family(self) -> str | None:
        return self.doc.get("family")

    def where(self, key: str) -> str:
        """`file:line` of a top-level key, for error messages."""
        line = getattr(self.doc, "key_lines", {}).get(key, getattr(self.doc, "line", None))
        return f"{self.file}:{line}" if line else self.file
