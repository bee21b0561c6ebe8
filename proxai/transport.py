"""Talking to providers: one pooled client session, provider auth, URL joins, idle-read timeouts."""

from __future__ import annotations

import asyncio
import os
from typing import Mapping

import aiohttp

from proxai.config import ProviderConfig
from proxai.errors import ANTHROPIC, CHAT, RESPONSES, UpstreamTimeout, UpstreamUnreachable

USER_AGENT = "proxai/0.1"

_PATHS = {CHAT: "/chat/completions", RESPONSES: "/responses", ANTHROPIC: "/v1/messages"}


def upstream_url(provider: ProviderConfig) -> str:
    """OpenAI base URLs end in /v1 (SDK convention); Anthropic ones do not."""
    return provider.base_url.rstrip("/") + _PATHS[provider.protocol]


def provider_headers(provider: ProviderConfig, client_headers: Mapping[str, str], stream: bool) -> dict[str, str]:
    """Headers for the provider. Only the provider's key goes upstream, never the client's."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "User-Agent": USER_AGENT,
    }
    if provider.protocol == ANTHROPIC:
        if provider.auth == "bearer":
            headers["Authorization"] = f"Bearer {provider.api_key}"
        else:
            headers["x-api-key"] = provider.api_key
        headers["anthropic-version"] = client_headers.get("anthropic-version") or provider.anthropic_version
        beta = client_headers.getall("anthropic-beta", None) if hasattr(client_headers, "getall") else None
        if beta is None and client_headers.get("anthropic-beta"):
            beta = [client_headers["anthropic-beta"]]
        if beta:
            headers["anthropic-beta"] = ",".join(beta)
    else:
        headers["Authorization"] = f"Bearer {provider.api_key}"
    return headers


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _proxy_configured() -> bool:
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


class Transport:
    """The pooled session; created on app startup, closed on cleanup."""

    def __init__(self, pool_size: int = 100):
        self._pool_size = pool_size
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._pool_size, limit_per_host=0, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(
            connector=connector,
            # One session serves every client: a provider's Set-Cookie must not ride
            # along on other clients' requests.
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
            # Honouring HTTP(S)_PROXY costs aiohttp two thread hops per request (env and
            # netrc lookups), so it is on only when a proxy is configured at startup.
            trust_env=_proxy_configured(),
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def send(
        self, provider: ProviderConfig, body: bytes, client_headers: Mapping[str, str], stream: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """POST to the provider and return once its status and headers arrived.

        Connection failures raise UpstreamUnreachable; no answer within the
        provider's idle-read timeout raises UpstreamTimeout.
        """
        assert self.session is not None, "transport not started"
        idle = provider.read_idle_timeout_secs
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(idle, 30.0), sock_read=idle)
        headers = provider_headers(provider, client_headers, stream)
        if extra_headers:  # trace context: never a client header, only what the proxy itself adds
            headers.update(extra_headers)
        try:
            return await self.session.post(
                upstream_url(provider),
                data=body,
                headers=headers,
                timeout=timeout,
            )
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(f"provider {provider.name!r} sent nothing for {idle:g}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"cannot reach provider {provider.name!r}: {_describe(exc)}") from None


async def read_body(resp: aiohttp.ClientResponse, provider: ProviderConfig, limit: int | None = None) -> bytes:
    """The whole (non-streamed) upstream body; its sock_read timeout is idle-based."""
    try:
        if limit is None:
            return await resp.read()
        data = await resp.content.read(limit)
        return data
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise UpstreamTimeout(
            f"provider {provider.name!r} went silent for {provider.read_idle_timeout_secs:g}s"
        ) from None
    except aiohttp.ClientError as exc:
        raise UpstreamUnreachable(f"provider {provider.name!r} dropped the connection: {_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    """A short, safe reason: the kind of failure and the host, never request content."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        where = f"{exc.host}:{exc.port}"
        reason = _reason(getattr(exc, "os_error", None))
        if isinstance(exc, aiohttp.ClientSSLError):
            return f"TLS handshake with {where} failed ({reason})"
        if isinstance(exc, getattr(aiohttp, "ClientConnectorDNSError", ())):
            return f"cannot resolve host {exc.host} ({reason})"
        return f"connection to {where} failed ({reason})"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS failure ({type(exc).__name__})"
    return type(exc).__name__


def _reason(err: BaseException | None) -> str:
    if err is None:
        return "unknown error"
    return getattr(err, "reason", None) or getattr(err, "strerror", None) or type(err).__name__
