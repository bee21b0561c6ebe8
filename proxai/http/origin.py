"""Web pages must not drive a proxy that asks for no key.

Without `server.api_keys`, any page the user opens could POST to a local proxy as a CORS
"simple" request (`Content-Type: text/plain`, no preflight) and spend the user's provider
quota; a page whose host name is re-pointed at 127.0.0.1 (DNS rebinding) could read the
answers and the stored responses too. So, without keys:

- a request carrying an `Origin` header must come from a page on this machine
  (`http(s)://localhost`, `127.0.0.1`, `[::1]`, `*.localhost`, any port) or from one of
  `server.allowed_origins`; clients other than browsers send no `Origin`;
- the `Host` header must be a loopback name or one of `server.allowed_hosts`, when the
  server listens on a loopback address or `server.allowed_hosts` is set.

With keys none of this applies: a page cannot know a key. /healthz and /readyz are exempt.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Mapping

from proxai.http import errors as E
from proxai.routing.config import ServerConfig

# Orchestrators probe a pod by its IP with any Host header they like; the answers hold no data.
PROBES = frozenset({"/healthz", "/readyz"})


class BrowserRefused(E.ProxyError):
    """403: a browser page on another site, or a host name that is not this machine's."""

    status = 403
    kind = "forbidden"


ORIGIN_REFUSED = (
    "request refused: its Origin header names a web page on another site, and this proxy requires "
    "no API key; call it from a page on localhost, list the page's origin in server.allowed_origins, "
    "or set server.api_keys"
)
HOST_REFUSED = (
    "request refused: its Host header is not a loopback name (localhost, 127.0.0.1, [::1]), as a page "
    "reaching this proxy by DNS rebinding would send, and this proxy requires no API key; call it by one "
    "of those names, list the name in server.allowed_hosts, or set server.api_keys"
)


def refusal(headers: Mapping[str, str], path: str, server: ServerConfig, *, check_host: bool = True) -> BrowserRefused | None:
    """Why a request must not be served, or None. `check_host=False` leaves the Host
    header to a route with its own rule."""
    if server.api_keys or path in PROBES:
        return None
    page = headers.get("Origin")
    if page is not None and not origin_allowed(page, server.allowed_origins):
        return BrowserRefused(ORIGIN_REFUSED)
    host = headers.get("Host")  # absent only from HTTP/1.0 clients, never from a browser
    if check_host and host is not None and host_checked(server) and not host_allowed(host, server.allowed_hosts):
        return BrowserRefused(HOST_REFUSED)
    return None


def origin_allowed(page: str, allowed: tuple[str, ...]) -> bool:
    return loopback_origin(page) or page.lower() in {o.lower() for o in allowed}


def host_checked(server: ServerConfig) -> bool:
    # A listener on 0.0.0.0 is reached by whatever name the network gives it: only an
    # explicit allowed_hosts list says which names are right.
    return bool(server.allowed_hosts) or loopback_listener(server.host)


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    return loopback_host(host) or host_name(host) in {host_name(h) for h in allowed}


@functools.lru_cache(maxsize=16)
def loopback_listener(bind: str) -> bool:
    return bind == "localhost" or is_loopback(bind)


def loopback_origin(page: str) -> bool:
    """An origin (`scheme://host[:port]`) served from this machine."""
    scheme, sep, authority = page.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or "/" in authority or "@" in authority:
        return False
    return loopback_host(authority)


@functools.lru_cache(maxsize=256)  # every request asks this of its Host header; clients send a few names
def loopback_host(host: str) -> bool:
    """A Host header naming this machine: localhost or a loopback address (any port)."""
    name = host_name(host)
    return name == "localhost" or name.endswith(".localhost") or is_loopback(name)


def host_name(host: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower case."""
    if host.startswith("["):
        name = host[1:].partition("]")[0]
    else:
        name = host.rpartition(":")[0] if host.count(":") == 1 else host
    return name.lower()


def is_loopback(address: str | None) -> bool:
    """A loopback IP address, IPv4-mapped ones (`::ffff:127.0.0.1`) included."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0]) if address is not None else None
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 on a dual-stack socket
        return ip is not None and ip.is_loopback
    except ValueError:
        return False
