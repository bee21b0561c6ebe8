"""The search backends the proxy runs a web search with: SearXNG, Brave, Tavily.

Each backend is one request shape and one answer shape; `search` returns the results as
`Result`s (url, title, snippet, page age) whichever backend answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

BRAVE_URL = "https://api.search.brave.com"
TAVILY_URL = "https://api.tavily.com"


class SearchFailed(Exception):
    """The backend could not answer (unreachable, an error status, an answer of another shape)."""


@dataclass(frozen=True)
class Result:
    url: str
    title: str
    snippet: str = ""
    page_age: str | None = None


@dataclass(frozen=True)
class Settings:
    backend: str  # searxng | brave | tavily
    url: str | None = None
    api_key: str | None = None
    max_results: int = 5
    max_searches: int = 5
    timeout_secs: float = 10.0

    @classmethod
    def from_config(cls, doc: dict | None) -> "Settings | None":
        return cls(**doc) if doc else None

    def __repr__(self) -> str:  # never show the key
        return f"Settings(backend={self.backend!r}, url={self.url!r})"


@dataclass(frozen=True)
class Call:
    """One HTTP request to a backend."""
    method: str
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    json: dict | None = None


def request_for(settings: Settings, query: str) -> Call:
    n = settings.max_results
    if settings.backend == "searxng":
        return Call("GET", _base(settings, None) + "/search", {"q": query, "format": "json"}, {"Accept": "application/json"})
    if settings.backend == "brave":
        return Call("GET", _base(settings, BRAVE_URL) + "/res/v1/web/search", {"q": query, "count": str(n)},
                    {"Accept": "application/json", "X-Subscription-Token": settings.api_key or ""})
    if settings.backend == "tavily":
        return Call("POST", _base(settings, TAVILY_URL) + "/search", {},
                    {"Content-Type": "application/json", "Authorization": f"Bearer {settings.api_key or ''}"},
                    {"query": query, "max_results": n, "search_depth": "basic"})
    raise ValueError(f"unknown web search backend {settings.backend!r}")


def results_from(settings: Settings, answer: Any) -> list[Result]:
    """The backend's JSON answer -> up to max_results results."""
    if not isinstance(answer, dict):
        raise SearchFailed(f"{settings.backend} answered with something other than a JSON object")
    if settings.backend == "brave":
        web = answer.get("web")
        items = web.get("results") if isinstance(web, dict) else None
        fields = ("description", "page_age", "age")
    else:  # SearXNG and Tavily: {"results": [{url, title, content}]}
        items = answer.get("results")
        fields = ("content", "publishedDate", "published_date")
    if not isinstance(items, list):
        raise SearchFailed(f"{settings.backend} answered without a results list")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        snippet, *ages = (item.get(f) for f in fields)
        age = next((a for a in ages if isinstance(a, str) and a), None)
        out.append(Result(item["url"], str(item.get("title") or item["url"]), str(snippet or ""), age))
    return out[: settings.max_results]


async def search(settings: Settings, session: aiohttp.ClientSession, query: str) -> list[Result]:
    call = request_for(settings, query)
    timeout = aiohttp.ClientTimeout(total=settings.timeout_secs)
    try:
        async with session.request(call.method, call.url, params=call.params or None, headers=call.headers,
                                   data=orjson.dumps(call.json) if call.json is not None else None,
                                   timeout=timeout) as resp:
            data = await resp.read()
            if resp.status != 200:
                raise SearchFailed(f"{settings.backend} answered HTTP {resp.status}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SearchFailed(f"{settings.backend} could not be reached ({type(exc).__name__})") from None
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise SearchFailed(f"{settings.backend} answered with a body that is not JSON") from None
    return results_from(settings, answer)


def _base(settings: Settings, default: str | None) -> str:
    return (settings.url or default or "").rstrip("/")
