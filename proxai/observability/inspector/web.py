"""The inspector's HTTP side: the page, its static files and its JSON API, under /_proxai/.

    GET  /_proxai/                     the page (static HTML, CSS and JS shipped in the package)
    GET  /_proxai/api/requests         recent requests, newest first (memory ring, then captures on disk)
    GET  /_proxai/api/requests/{key}   one request: phases, stream timeline, traces, error
    GET  /_proxai/api/events           server-sent events: each request as it starts and ends
    POST /_proxai/api/translate        {kind, from, to, body[, client_request]}: a dry run through the rules

Access: loopback clients only unless `server.inspector.loopback_only: false`;
with `server.api_keys` every route needs one of the keys, as Bearer, x-api-key
or HTTP Basic password (so a browser can log in).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

import engine
from proxai.observability import capture
from proxai.tools import dryrun
from proxai.observability.inspector import view
from proxai.observability.inspector.record import Ring
from proxai.http.origin import is_loopback, loopback_host

if TYPE_CHECKING:
    from proxai.http.surface import Proxy

PREFIX = "/_proxai"
STATIC = Path(__file__).resolve().parent / "static"
_STATIC_FILES = {"inspector.js": "text/javascript", "inspector.css": "text/css", "favicon.svg": "image/svg+xml"}
DISK_LIMIT = 200  # captured requests listed from disk
KEEPALIVE_SECS = 15.0

# Served with every answer: no framing, no inline script, nothing cached, no referrer.
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class InspectorWeb:
    def __init__(self, proxy: "Proxy", ring: Ring):
        self.proxy = proxy
        self.ring = ring
        self._disk_cache: dict[tuple[str, float], dict] = {}

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get(PREFIX, self.redirect)
        r.add_get(PREFIX + "/", self.page)
        r.add_get(PREFIX + "/static/{name}", self.static)
        r.add_get(PREFIX + "/api/requests", self.requests)
        r.add_get(PREFIX + "/api/requests/{key}", self.request)
        r.add_get(PREFIX + "/api/events", self.events)
        r.add_post(PREFIX + "/api/translate", self.translate)
        app.on_shutdown.append(self._on_shutdown)

    async def _on_shutdown(self, app: web.Application) -> None:
        self.ring.close()  # open event streams end, so shutdown does not wait on them

    # --- access -------------------------------------------------------------------------

    def _denied(self, request: web.Request) -> web.Response | None:
        settings = self.proxy.config.server
        if settings.inspector.loopback_only:
            if not is_loopback(request.remote) or not loopback_host(request.host):
                # The Host check stops DNS rebinding: a page on another site resolving to 127.0.0.1.
                return _json({"error": {"message": f"no endpoint at {request.path}"}}, 404)
        keys = settings.api_keys
        if keys and not _key_ok(request, keys):
            response = _json({"error": {"message": "missing or invalid API key for this proxy"}}, 401)
            response.headers["WWW-Authenticate"] = 'Basic realm="ProxAI inspector", charset="UTF-8"'
            return response
        return None

    # --- handlers ----------------------------------------------------------------------

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        return self._denied(request) or _secure(web.Response(status=302, headers={"Location": PREFIX + "/"}))

    async def page(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        return _secure(web.Response(body=(STATIC / "index.html").read_bytes(), content_type="text/html", charset="utf-8"))

    async def static(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        name = request.match_info["name"]
        if name not in _STATIC_FILES:
            return _json({"error": {"message": f"no endpoint at {request.path}"}}, 404)
        response = web.Response(body=(STATIC / name).read_bytes())
        response.headers["Content-Type"] = _STATIC_FILES[name] + ("; charset=utf-8" if name.endswith((".js", ".css")) else "")
        return _secure(response)

    async def requests(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        memory = [view.summary(e) for e in reversed(self.ring.entries.values())]
        seen = {row["request_id"] for row in memory}
        disk = self._disk_rows(seen) if request.query.get("disk", "1") != "0" else []
        return _json({
            "requests": memory + disk,
            "ring_size": self.ring.size,
            "capture_to_disk": self.proxy.recorder is not None,
            "protocols": list(self.proxy.engine.wire.names),
            # Each protocol's title and API family, from its descriptor (the list's labels).
            "protocol_info": {p: {"title": self.proxy.engine.wire.title(p), "family": self.proxy.engine.wire.family(p)}
                              for p in self.proxy.engine.wire.names},
        })

    async def request(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        key = request.match_info["key"]
        if key.startswith("disk:"):
            rid = key[5:]
            phases = capture.load(rid, self._root()) if _safe_id(rid) else {}
            if not phases:
                return _json({"error": {"message": f"no captured request {rid!r}"}}, 404)
            mtime = max((self._root() / f"{rid}.{p}{capture.SUFFIX}").stat().st_mtime for p in phases)
            return _json(view.disk_detail(rid, phases, mtime, self.proxy.engine))
        entry = self.ring.get(int(key)) if key.isdigit() else None
        if entry is None:
            return _json({"error": {"message": "that request is no longer in the inspector's memory"}}, 404)
        return _json(view.detail(entry))

    async def events(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        response = _secure(web.StreamResponse(status=200))
        response.headers["Content-Type"] = "text/event-stream; charset=utf-8"
        await response.prepare(request)
        queue = self.ring.subscribe()
        try:
            await response.write(b"retry: 2000\n\n")
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_SECS):
                        entry = await queue.get()
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if entry is None:
                    break
                await response.write(b"event: request\ndata: " + orjson.dumps(view.summary(entry)) + b"\n\n")
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.ring.unsubscribe(queue)
        return response

    async def translate(self, request: web.Request) -> web.StreamResponse:
        denied = self._denied(request)
        if denied:
            return denied
        try:
            doc = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _json({"error": {"message": "expected a JSON object {kind, from, to, body}"}}, 400)
        if not isinstance(doc, dict):
            return _json({"error": {"message": "expected a JSON object {kind, from, to, body}"}}, 400)
        kind, source, target = doc.get("kind", "request"), doc.get("from"), doc.get("to")
        if kind not in ("request", "response", "stream"):
            return _json({"error": {"message": "kind must be request, response or stream"}}, 400)
        for name, value in (("from", source), ("to", target)):
            if value not in self.proxy.engine.wire:
                return _json({"error": {"message": f"{name} must be one of {', '.join(self.proxy.engine.wire.names)}"}}, 400)
        body = doc.get("body")
        if not isinstance(body, str):
            return _json({"error": {"message": "body must be a string (the payload to translate)"}}, 400)
        client_body = None
        if isinstance(doc.get("client_request"), str) and doc["client_request"].strip():
            try:
                client_body = orjson.loads(doc["client_request"])
            except orjson.JSONDecodeError:
                return _json({"ok": False, "error": {"message": "the client request is not valid JSON"}, "traces": []})
        try:
            output, traces = dryrun.translate(self.proxy.engine, kind, source, target, body.encode(), client_body)
        except (ValueError, UnicodeDecodeError) as err:
            return _json({"ok": False, "error": {"message": f"the body is not valid JSON: {err}"}, "traces": []})
        except engine.TranslationError as err:
            return _json({"ok": False, "traces": [],
                          "error": {"message": err.message, "param": err.param, "rule": err.rule}})
        return _json({"ok": True, "output": output, "traces": traces})

    # --- captures on disk ------------------------------------------------------------

    def _root(self) -> Path:
        recorder = self.proxy.recorder
        return recorder.root if recorder is not None else capture.directory()

    def _disk_rows(self, skip: set[str]) -> list[dict]:
        root = self._root()
        rows = []
        cache: dict[tuple[str, float], dict] = {}
        for rid, mtime, _ in capture.list_requests(root)[:DISK_LIMIT]:
            if rid in skip:
                continue
            row = self._disk_cache.get((rid, mtime))
            if row is None:
                row = view.disk_summary(rid, mtime, capture.load(rid, root), self.proxy.engine)
            cache[(rid, mtime)] = row
            rows.append(row)
        self._disk_cache = cache
        return rows


def _json(doc: Any, status: int = 200) -> web.Response:
    response = web.Response(status=status, body=orjson.dumps(doc, default=str))
    response.headers["Content-Type"] = "application/json"
    return _secure(response)


def _secure(response):
    response.headers.update(_SECURITY_HEADERS)
    return response


def _safe_id(rid: str) -> bool:
    return bool(rid) and "/" not in rid and "\\" not in rid and not rid.startswith(".")


def _key_ok(request: web.Request, keys: tuple[str, ...]) -> bool:
    presented = request.headers.get("x-api-key")
    auth = request.headers.get("Authorization", "")
    if presented is None and auth[:7].lower() == "bearer ":
        presented = auth[7:].strip()
    elif presented is None and auth[:6].lower() == "basic ":
        try:
            presented = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            presented = None
    ok = False
    if presented:
        candidate = presented.encode()
        for key in keys:  # every key is compared, so timing says nothing about which matched
            ok |= hmac.compare_digest(candidate, key.encode())
    return ok

