"""Request ids: taken from the client's `x-request-id` when it is safe, else minted.

The id names the request everywhere: the `x-proxai-request-id` response header,
every log line written while the request runs, and its capture file names. So a
client-supplied id must be short and made of characters that are harmless in a
file name and a log line; anything else is replaced by a minted id.
"""

from __future__ import annotations

import contextvars
import re
import secrets
from typing import Mapping, MutableMapping

HEADER = "x-request-id"
# Our own id always travels under this name; the header each client SDK reports
# as `request_id` carries the provider's id, which is what its support asks for.
PROXY_HEADER = "x-proxai-request-id"
UPSTREAM_HEADERS = ("x-request-id", "request-id")

MAX_LENGTH = 128
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (MAX_LENGTH - 1))

current: contextvars.ContextVar[str | None] = contextvars.ContextVar("proxai_request_id", default=None)


def is_safe(text: str) -> bool:
    """A request id as the proxy accepts or mints one (also safe as part of a file name)."""
    return _SAFE.fullmatch(text) is not None


def mint() -> str:
    return "req_" + secrets.token_hex(12)


def from_client(headers: Mapping[str, str]) -> str:
    """The client's `x-request-id` if it is 1-128 characters of [A-Za-z0-9._-]
    starting with a letter or digit; otherwise a fresh id."""
    given = headers.get(HEADER)
    if given and _SAFE.fullmatch(given):
        return given
    return mint()


def upstream_id(headers: Mapping[str, str], native: str = HEADER) -> str | None:
    """The provider's request id (OpenAI `x-request-id`, Anthropic `request-id`; its own
    protocol's header `native` first, from its descriptor), if safe to log."""
    for name in (native, *(n for n in UPSTREAM_HEADERS if n != native)):
        value = headers.get(name)
        if value:
            return value if _SAFE.fullmatch(value) else None
    return None


def stamp(headers: MutableMapping[str, str], request_id: str, name: str = HEADER,
          upstream: str | None = None) -> None:
    """Our id under `x-proxai-request-id`; the provider's id (when one answered) under
    `name`, the header the client SDK surfaces as the request id (its protocol's
    descriptor's `headers.request_id`), beside its original name already passed on; else ours."""
    headers[PROXY_HEADER] = request_id
    if name not in headers:  # not already the provider's own, passed on by name
        headers[name] = upstream or request_id
