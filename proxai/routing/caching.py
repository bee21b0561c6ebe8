"""Per-request prompt caching settings for the engine: the provider's policy, the
client's prompt_cache_key override header, and the HMAC key derived keys use.

The mechanism is in engine/hooks/caching.py; this module only reads config and headers.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from proxai.http import errors as E
from proxai.routing.config import ProviderConfig

#: A client that wants its own OpenAI prompt_cache_key (Claude Code: ANTHROPIC_CUSTOM_HEADERS).
OVERRIDE_HEADER = "x-proxai-prompt-cache-key"
_KEY = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def caching_context(provider: ProviderConfig, headers: Mapping[str, str], secret: str | None = None) -> dict[str, Any]:
    override = headers.get(OVERRIDE_HEADER)
    if override is not None and not _KEY.fullmatch(override):
        raise E.InvalidRequest(f"header {OVERRIDE_HEADER} must be 1-64 letters, digits or . _ : -", param=OVERRIDE_HEADER)
    return {
        "prompt_caching": provider.prompt_caching,
        "prompt_cache_key": override,
        "cache_key_tenant": tenant_material(headers),
        # The deployment's secret (continuation.secret) when set: stable across processes
        # and restarts (no shared state), and a derived key then cannot even be matched
        # against a guessed prompt. Without it the engine's built-in key is used.
        "cache_key_secret": hashlib.sha256(b"proxai prompt_cache_key\0" + secret.encode()).digest() if secret else None,
    }


def tenant_material(headers: Mapping[str, str]) -> bytes:
    """Who is asking, as derived keys take it: a digest of the client's key (any of the
    headers the four protocols send it in), so two tenants with the same system prompt
    never share a provider cache key. Empty when the client sent no key."""
    presented = headers.get("x-api-key") or headers.get("x-goog-api-key")
    if presented is None:
        auth = headers.get("Authorization", "")
        presented = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    if not presented:
        return b""
    return hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
