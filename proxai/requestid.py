"""Request ids: taken from the client's `x-request-id` when it is safe, else minted.

The id names the request everywhere: the `x-request-id` response header, every
log line written while the request runs, and its capture file names. So a
client-supplied id must be short and made of characters that are harmless in a
file name and a log line; anything else is replaced by a minted id.
"""

from __future__ import annotations

import contextvars
import re
import secrets
from typing import Mapping, MutableMapping

HEADER = "x-request-id"
# The provider's own `x-request-id` would collide with ours in the client's
# response, so it is passed on under this name (Anthropic's `request-id` does not
# collide and is passed on unchanged).
UPSTREAM_HEADER = "x-upstream-request-id"
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


def upstream_id(headers: Mapping[str, str]) -> str | None:
    """The provider's request id (OpenAI `x-request-id`, Anthropic `request-id`), if safe to log."""
    for name in UPSTREAM_HEADERS:
        value = headers.get(name)
        if value:
            return value if _SAFE.fullmatch(value) else None
    return None


def stamp(headers: MutableMapping[str, str], request_id: str) -> None:
    """Set our id on a response; move a provider `x-request-id` already there aside."""
    theirs = headers.get(HEADER)
    if theirs is not None and theirs != request_id:
        headers[UPSTREAM_HEADER] = theirs
    headers[HEADER] = request_id
