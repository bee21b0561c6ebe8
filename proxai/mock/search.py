"""A mock web search backend: SearXNG's `GET /search?format=json`, Brave's
`GET /res/v1/web/search` and Tavily's `POST /search`, each answering in its own shape
with the same scripted results. Every request is recorded (method, path, query, headers, body).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

DEFAULT_RESULTS = [
    {"url": "https://example.org/proxai", "title": "ProxAI: an LLM protocol proxy", "snippet": "ProxAI translates between LLM API protocols.",
     "age": "2026-01-15"},
    {"url": "https://example.com/news", "title": "News about proxies", "snippet": "A proxy answered every SDK.", "age": None},
]


@dataclass
class Searched:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None


@dataclass
class MockSearch:
    results: list[dict] = field(default_factory=lambda: [dict(r) for r in DEFAULT_RESULTS])
    status: int = 200
    requests: list[Searched] = field(default_factory=list)
    delay_secs: float = 0.0  # before each answer (a slow backend)

    def reset(self) -> None:
        self.results = [dict(r) for r in DEFAULT_RESULTS]
        self.status = 200
        self.delay_secs = 0.0
        self.requests.clear()

    @property
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_post("/search", self._tavily)
        app.router.add_get("/res/v1/web/search", self._brave)
        return app

    async def _record(self, request: web.Request) -> Searched:
        raw = await request.read()
        record = Searched(request.method, request.path, dict(request.query), dict(request.headers),
                          orjson.loads(raw) if raw else None)
        self.requests.append(record)
        if self.delay_secs:
            await asyncio.sleep(self.delay_secs)
        return record

    def _answer(self, body: dict) -> web.Response:
        if self.status != 200:
            return web.json_response({"error": "mock failure"}, status=self.status)
        return web.json_response(body)

    async def _searxng(self, request: web.Request) -> web.Response:
        record = await self._record(request)
        if record.query.get("format") != "json":
            return web.Response(status=403, text="format not allowed")  # as SearXNG without json enabled
        return self._answer({"query": record.query.get("q"), "number_of_results": len(self.results), "results": [
            {"url": r["url"], "title": r["title"], "content": r["snippet"], "engine": "mock", "publishedDate": r["age"]}
            for r in self.results]})

    async def _brave(self, request: web.Request) -> web.Response:
        record = await self._record(request)
        if not record.headers.get("X-Subscription-Token"):
            return web.json_response({"type": "ErrorResponse"}, status=422)
        return self._answer({"type": "search", "query": {"original": record.query.get("q")}, "web": {"type": "search", "results": [
            {"title": r["title"], "url": r["url"], "description": r["snippet"], "page_age": r["age"]} for r in self.results]}})

    async def _tavily(self, request: web.Request) -> web.Response:
        record = await self._record(request)
        if not record.headers.get("Authorization", "").startswith("Bearer "):
            return web.json_response({"detail": {"error": "Unauthorized"}}, status=401)
        n = (record.body or {}).get("max_results", 5)
        return self._answer({"query": (record.body or {}).get("query"), "results": [
            {"title": r["title"], "url": r["url"], "content": r["snippet"], "score": 0.9, "published_date": r["age"]}
            for r in self.results[:n]]})
