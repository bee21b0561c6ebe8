"""A namespaced tool's name as providers without namespaces see it (one leaf module:
the request fitting, the Responses hooks and tool search all flatten names this way)."""
from __future__ import annotations

import hashlib
import re

# The shortest tool-name limit of the four protocols (Chat and Gemini: 64 characters).
MAX_NAME = 64
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(namespace: str | None, name: str) -> str:
    """``crm`` + ``lookup`` -> ``crm__lookup``; a namespace that already ends in ``_``
    (Codex's ``mcp__server__``) is joined as is. Over-long names keep a stable hash."""
    if not namespace:
        return name
    joined = f"{namespace}{name}" if namespace.endswith("_") else f"{namespace}__{name}"
    # Anthropic and Chat tool names are [a-zA-Z0-9_-]: anything else becomes `_`.
    joined = _NOT_NAME.sub("_", joined)
    if len(joined) <= MAX_NAME:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:10]
    return f"{joined[:MAX_NAME - 11]}_{digest}"
