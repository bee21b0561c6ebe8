"""A turn's pin: Codex's ``x-codex-turn-state`` (docs/routing.md "A turn stays on its key").

The server gives a turn-state token on a turn's first response; Codex sends it back on
every request of that turn (its tool-call rounds), so they reach the backend that served
the first one. The proxy plays that server: on a pooled route (several keys, balanced
providers or fallbacks) a request of a protocol whose descriptor names the header
(``headers.turn_state``) and carries none gets a new token in the answer's headers; the
token's pin, the key that served it, is kept in the state store, and a request that
carries the token tries that key (and its provider) first, whatever the route's strategy.
When that key cannot serve and a fallback does, the pin moves to the key that did. Over
the Responses WebSocket the handshake gives the token (or keeps the one the client sent)
and every turn on the socket carries it.

The token is the proxy's own. A token the proxy did not mint pins the same way once a
request with it has been served; none is sent on to a provider, and a Responses
provider's own turn state is not relayed: the proxy's pin is what it would ask its load
balancer for.
"""
from __future__ import annotations

import logging
import re
import secrets
from dataclasses import dataclass

from proxai.state.base import StateError

log = logging.getLogger("proxai.turn_state")

PREFIX = "pxts_"
KEY = "turn:"
# A turn lasts minutes; a pin outlives any turn Codex keeps going.
TTL_SECS = 6 * 3600
# What is taken as a token: printable, bounded (it names a state-store entry).
_TOKEN = re.compile(r"[\x21-\x7e]{1,256}")


@dataclass
class Turn:
    header: str
    token: str
    pinned: str | None  # the key fingerprint the turn is on (None: its first request)
    store: object

    @property
    def conversation(self) -> str | None:
        """The conversation key that puts the request on the pinned key (pools: ``turn:``)."""
        return "turn:" + self.pinned if self.pinned else None

    async def served(self, key: str | None) -> None:
        """Pin the turn to the key that served this request (a fallback moves it)."""
        if not key or key == self.pinned:
            return
        try:
            await self.store.kv_set(KEY + self.token, key.encode(), ttl_secs=TTL_SECS)
        except StateError as exc:
            log.warning("turn state pin not recorded (%s)", exc)


def token(sent: str | None) -> str:
    """The token a client sent when it is one, else a new one."""
    return sent if sent is not None and _TOKEN.fullmatch(sent) else PREFIX + secrets.token_urlsafe(24)


async def begin(store, header: str, headers, socket_token: str | None = None) -> Turn:
    """The request's turn: the token it carries (a WebSocket's: the one its handshake gave,
    ``socket_token``) and that token's pin, or a new token."""
    sent = socket_token or headers.get(header)
    if sent is None or not _TOKEN.fullmatch(sent):
        return Turn(header, token(None), None, store)
    try:
        pinned = await store.kv_get(KEY + sent)
    except StateError as exc:
        log.warning("turn state pin not read (%s)", exc)
        pinned = None
    return Turn(header, sent, pinned.decode() if pinned else None, store)
