"""Talking to providers: one pooled client session, provider auth, URL joins, idle-read timeouts.

Redirects are never followed: a provider's 3xx would carry the provider's key
and the prompt to whatever host it names. A pooled connection that fails before
any answer byte (the provider closed it while idle) is retried once on a fresh
connection; any other failure is reported as it happened.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import weakref
from typing import Mapping

import aiohttp
import yarl

from proxai.http.body_guard import READ_FAILURES, BodyGuard
from proxai.routing.config import ProviderConfig
from proxai.http.errors import UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable
from engine.wire import Wire

log = logging.getLogger("proxai.transport")

USER_AGENT = "proxai/0.1"

def upstream_url(provider: ProviderConfig, path: str, query: str = "") -> str:
    """`path` (an operation's, from the protocol's descriptor) below the provider's base_url;
    `query` is a raw query string kept as the client sent it."""
    url = provider.base_url.rstrip("/") + path
    return f"{url}?{query}" if query else url


def provider_headers(wire: Wire, provider: ProviderConfig, client_headers: Mapping[str, str], stream: bool) -> dict[str, str]:
    """Headers for the provider: the protocol's auth and passed-on client headers (its
    descriptor's `headers`). Only the provider's key goes upstream, never the client's."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "User-Agent": USER_AGENT,
    }
    headers.update(wire.provider_headers(provider.protocol, provider.api_key, provider, client_headers))
    return headers


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _proxy_configured() -> bool:
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


class _Attempt:
    """One try of a request: did the pool hand it a connection used before?"""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("proxai_attempt", default=None)


class _PoolConnector(aiohttp.TCPConnector):
    """A TCPConnector that notes on the current attempt whether the connection came from the pool
    (cheaper than aiohttp's request tracing, which costs several awaits on every request)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen: weakref.WeakSet = weakref.WeakSet()

    async def connect(self, req, traces, timeout):
        conn = await super().connect(req, traces, timeout)
        protocol = conn.protocol
        if protocol is not None:
            if protocol in self._seen:
                attempt = _attempt.get()
                if attempt is not None:
                    attempt.reused = True
            else:
                self._seen.add(protocol)
        return conn


class Transport:
    """The pooled session; created on app startup, closed on cleanup."""

    def __init__(self, pool_size: int = 100):
        self._pool_size = pool_size
        self.session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # never pools: the one retry's connection
        # Built once, not per request: timeouts per idle value, URLs, and the headers of
        # providers whose headers do not depend on the client's (all but Anthropic).
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._urls: dict[tuple, yarl.URL] = {}
        self._headers: dict[tuple, dict[str, str]] = {}

    def _session(self, connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
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

    async def start(self) -> None:
        connector = _PoolConnector(limit=self._pool_size, limit_per_host=0, keepalive_timeout=30)
        self.session = self._session(connector)
        self._fresh = self._session(aiohttp.TCPConnector(limit=0, force_close=True))

    async def close(self) -> None:
        for name in ("session", "_fresh"):
            session = getattr(self, name)
            if session is not None:
                await session.close()
                setattr(self, name, None)

    async def send(
        self,
        wire: Wire,
        provider: ProviderConfig,
        body: bytes,
        client_headers: Mapping[str, str],
        stream: bool,
        extra_headers: Mapping[str, str] | None = None,
        *,
        path: str,
        query: str = "",
    ) -> aiohttp.ClientResponse:
        """POST to the provider and return once its status and headers arrived.

        Connection failures raise UpstreamUnreachable; no complete status line and
        headers within the provider's idle-read timeout raises UpstreamTimeout; a
        redirect or a malformed answer raises UpstreamProtocolError.
        """
        assert self.session is not None and self._fresh is not None, "transport not started"
        idle = provider.read_idle_timeout_secs
        timeout = self._timeouts.get(idle)
        if timeout is None:
            timeout = self._timeouts[idle] = aiohttp.ClientTimeout(total=None, sock_connect=min(idle, 30.0), sock_read=idle)
        url = self._url(provider, path, query)
        if wire.client_dependent_headers(provider.protocol):  # some come from the client
            headers = provider_headers(wire, provider, client_headers, stream)
        else:
            key = (id(wire), provider.protocol, provider.api_key, provider.auth, stream)
            fixed = self._headers.get(key)
            if fixed is None:
                fixed = self._headers[key] = provider_headers(wire, provider, client_headers, stream)
            headers = dict(fixed)
        if extra_headers:  # trace context: never a client header, only what the proxy itself adds
            headers.update(extra_headers)
        attempt = _Attempt()
        token = _attempt.set(attempt)
        session = self.session
        try:
            return await self._post(provider, session, url, headers, body, timeout, attempt, idle)
        finally:
            _attempt.reset(token)

    async def forward(
        self, wire: Wire, provider: ProviderConfig, method: str, path: str, query: Mapping[str, str],
        client_headers: Mapping[str, str],
    ) -> aiohttp.ClientResponse:
        """A body-less GET or DELETE of one of the provider's own resources (a Responses
        provider's stored response): `path` is already escaped segment by segment, `query`
        is re-encoded from its decoded pairs. The same protections as generation: no
        redirects, idle timeouts, one retry of a stale pooled connection."""
        assert self.session is not None and self._fresh is not None, "transport not started"
        idle = provider.read_idle_timeout_secs
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(idle, 30.0), sock_read=idle)
        url = yarl.URL(provider.base_url.rstrip("/") + path, encoded=True)
        if query:
            url = url.with_query(query)
        headers = provider_headers(wire, provider, client_headers, False)
        headers.pop("Content-Type", None)
        attempt = _Attempt()
        token = _attempt.set(attempt)
        try:
            return await self._post(provider, self.session, url, headers, None, timeout, attempt, idle, method=method)
        finally:
            _attempt.reset(token)

    def _url(self, provider: ProviderConfig, path: str, query: str) -> yarl.URL:
        if query:  # as the client sent it: not kept
            return yarl.URL(upstream_url(provider, path, query), encoded=True)
        key = (provider.base_url, path)
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) >= 1024:  # paths may name the model: keep the cache bounded
                self._urls.clear()
            # encoded=True: the path goes upstream byte for byte
            url = self._urls[key] = yarl.URL(upstream_url(provider, path), encoded=True)
        return url

    async def _post(self, provider, session, url, headers, body, timeout, attempt, idle,
                    method: str = "POST") -> aiohttp.ClientResponse:
        while True:
            try:
                # sock_read restarts with every byte; this bounds headers sent a byte at a time.
                async with asyncio.timeout(idle):
                    resp = await session.request(
                        method, url, data=body, headers=headers, timeout=timeout, allow_redirects=False,
                    )
                break
            except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
                raise UpstreamTimeout(f"provider {provider.name!r} sent no complete answer head for {idle:g}s") from None
            except aiohttp.ClientConnectorError as exc:
                raise UpstreamUnreachable(f"cannot reach provider {provider.name!r}: {_describe(exc)}") from None
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if attempt.reused and session is self.session:
                    # The provider closed an idle pooled connection as we reused it: it never saw
                    # this request, so one retry on a connection of its own is safe.
                    log.info("pooled connection to provider %s failed before any answer (%s); retrying on a fresh one",
                             provider.name, type(exc).__name__)
                    session, attempt.reused = self._fresh, False
                    continue
                raise UpstreamProtocolError(
                    f"provider {provider.name!r} closed the connection before answering ({type(exc).__name__})"
                ) from None
            except aiohttp.ClientResponseError as exc:  # a malformed status line or headers
                raise UpstreamProtocolError(
                    f"provider {provider.name!r} sent a malformed HTTP answer ({type(exc).__name__}: {_short(exc.message)})"
                ) from None
            except aiohttp.ClientError as exc:
                raise UpstreamProtocolError(f"provider {provider.name!r} failed: {_describe(exc)}") from None
            except ValueError as exc:  # aiohttp refused to write the request (a URL or header it cannot send)
                raise UpstreamProtocolError(
                    f"the request to provider {provider.name!r} could not be sent ({type(exc).__name__})") from None
        if 300 <= resp.status < 400:
            resp.close()
            where = _redirect_host(resp.headers.get("Location"))
            raise UpstreamProtocolError(
                f"provider {provider.name!r} answered with a redirect (HTTP {resp.status}{where}); "
                "redirects are never followed: check the provider's base_url"
            )
        return resp


def _redirect_host(location: str | None) -> str:
    if not location:
        return ""
    try:
        host = aiohttp.client.URL(location).host
    except (ValueError, TypeError):
        host = None
    return f" to host {_short(host)}" if host else " to a relative location"


def _short(text: object, limit: int = 80) -> str:
    value = "".join(ch for ch in str(text or "") if ch.isprintable())
    return value if len(value) <= limit else value[:limit] + "..."


# A body or stream that arrives faster than it is processed would otherwise hold the
# event loop for as long as it lasts: every this many bytes, other requests get a turn.
YIELD_EVERY_BYTES = 1 << 20


class UpstreamTooLarge(UpstreamProtocolError):
    pass


async def read_body(resp: aiohttp.ClientResponse, provider: ProviderConfig, limit: int | None = None,
                    *, cap: int | None = None) -> bytes:
    """The whole (non-streamed) upstream body; its sock_read timeout is idle-based.

    `limit`: read at most that many bytes and ignore the rest (error bodies).
    `cap`: a body longer than that once decompressed is an UpstreamTooLarge (502).
    """
    guard = BodyGuard(resp)  # a body whose framing breaks ends the read instead of hanging it
    try:
        if limit is not None:
            return await resp.content.read(limit)
        if cap is None:
            return await resp.read()
        length = resp.content_length
        if length is not None and length > cap and not resp.headers.get("Content-Encoding"):
            raise _too_large(provider, cap)
        parts: list[bytes] = []
        size = yielded = 0
        # Chunk by chunk (aiohttp inflates at most a buffer's worth per step), yielding
        # between chunks: a compressed bomb costs at most `cap` and never stalls the loop.
        while True:
            chunk = await resp.content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                raise _too_large(provider, cap)
            parts.append(chunk)
            if size - yielded >= YIELD_EVERY_BYTES:
                yielded = size
                await asyncio.sleep(0)
        data = b"".join(parts)
        resp.release()
        return data
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise UpstreamTimeout(
            f"provider {provider.name!r} went silent for {provider.read_idle_timeout_secs:g}s"
        ) from None
    except READ_FAILURES as exc:
        if guard.malformed(exc):
            raise UpstreamProtocolError(
                f"provider {provider.name!r} sent a malformed response body (its HTTP framing is invalid)") from None
        raise UpstreamProtocolError(f"provider {provider.name!r} dropped the connection: {_describe(exc)}") from None
    finally:
        guard.release()


def _too_large(provider: ProviderConfig, cap: int) -> UpstreamTooLarge:
    return UpstreamTooLarge(
        f"provider {provider.name!r} answered with a body larger than server.max_upstream_body_bytes ({cap} bytes)"
    )


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
