"""Who is asking: the client key a request presents, matched against `server.api_keys`.

A key comes as `x-api-key` (Anthropic), `Authorization: Bearer` (OpenAI) or, from Gemini
clients, `x-goog-api-key` or the `key` query parameter. The matched entry's name (never
the key) goes on the request's log line, metric labels, capture and inspector entry.
"""

from __future__ import annotations

import hmac
from typing import Mapping

from aiohttp import web

from proxai.http import errors as E
from proxai.routing.config import ClientKey


# Where a request keeps the key the client presented in its protocol's own place
# (x-goog-api-key, ?key=), once authorized: the state store's tenant is that key.
PRESENTED_KEY: web.RequestKey[str] = web.RequestKey("proxai.presented_key", str)


def presented(headers: Mapping[str, str]) -> str | None:
    """The key in `x-api-key` or `Authorization: Bearer`, as the OpenAI and Anthropic SDKs send it."""
    key = headers.get("x-api-key")
    if key is None:
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            key = auth[7:].strip()
    return key


def match(clients: tuple[ClientKey, ...], key: str | None) -> ClientKey | None:
    """The entry whose key is `key`. Every key is compared, so timing says nothing about which
    matched; aiohttp hands non-UTF-8 header bytes over as surrogates, and such a key matches none."""
    if not key:
        return None
    candidate = key.encode("utf-8", "surrogateescape")
    found = None
    for client in clients:
        if hmac.compare_digest(candidate, client.key.encode()) and found is None:
            found = client
    return found


def authorize(clients: tuple[ClientKey, ...], key: str | None, info: dict | None) -> ClientKey | None:
    """The client for `key`, noted on the request's `info`; Unauthorized when keys are
    configured and it matches none. None when the proxy asks for no key."""
    if not clients:
        return None
    client = match(clients, key)
    if client is None:
        raise E.Unauthorized("missing or invalid API key for this proxy")
    if info is not None:
        info["client"] = client.name
    return client
