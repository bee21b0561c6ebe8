"""Per-request prompt caching settings for the engine: the provider's policy, the
client's prompt_cache_key override header, and the HMAC key derived keys use.

The mechanism is in engine/hooks/caching.py; this module only reads config and headers.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from proxai import errors as E
from proxai.config import ProviderConfig

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
        # The deployment's secret (continuation.secret) when set: stable across processes
        # and restarts (no shared state), and a derived key then cannot even be matched
        # against a guessed prompt. Without it the engine's built-in key is used.
        "cache_key_secret": hashlib.sha256(b"proxai prompt_cache_key\0" + secret.encode()).digest() if secret else None,
    }
