"""Run the mock upstream and proxies on one background event loop, for synchronous SDK tests.

    h = Harness.start()            # one loop thread + one mock upstream
    p = h.start_proxy(config_dict) # a proxy app on 127.0.0.1:<free port>
    openai.OpenAI(base_url=p.url + "/v1", ...)
    p.stop(); h.stop()
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from dataclasses import dataclass
from typing import Any, Coroutine, TypeVar

import anthropic
import openai
from aiohttp import web

from proxai.http.app import PROXY_KEY, Proxy, build_app, make_runner
from proxai.routing.config import load_dict
from proxai.mock import MockUpstream, Text, Turn

T = TypeVar("T")

CLIENT_KEY = "client-key"
PROVIDER_KEYS = {
    "chat": "sk-provider-chat-SECRET",
    "responses": "sk-provider-responses-SECRET",
    "anthropic": "sk-provider-anthropic-SECRET",
}


class LoopThread:
    """An asyncio loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@dataclass
class Served:
    runner: web.AppRunner
    url: str


async def _serve(runner: web.AppRunner) -> Served:
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return Served(runner, f"http://{host}:{port}")


class ProxyHandle:
    def __init__(self, harness: "Harness", served: Served, app: web.Application):
        self._harness = harness
        self._served = served
        self.app = app
        self.url = served.url

    @property
    def proxy(self) -> Proxy:
        return self.app[PROXY_KEY]

    def openai(self, api_key: str = CLIENT_KEY, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, **kw)

    def anthropic(self, api_key: str = CLIENT_KEY, **kw: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=api_key, max_retries=0, **kw)

    def stop(self) -> None:
        self._harness.loop.run(self._served.runner.cleanup())


class Harness:
    def __init__(self, loop: LoopThread, mock: MockUpstream, mock_served: Served):
        self.loop = loop
        self.mock = mock
        self._mock_served = mock_served
        self.mock_url = mock_served.url

    @classmethod
    def start(cls) -> "Harness":
        loop = LoopThread()
        mock = MockUpstream()
        served = loop.run(_serve(web.AppRunner(mock.app, handle_signals=False, access_log=None)))
        return cls(loop, mock, served)

    def default_config(self) -> dict[str, Any]:
        """Providers chat / responses / anthropic on the mock; model `<provider>/<name>` picks one."""
        return default_config(self.mock_url)

    def start_proxy(self, config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> ProxyHandle:
        """A proxy for this config dict (default: `default_config()`); None values are not allowed, use {}."""
        doc = copy.deepcopy(config if config is not None else self.default_config())
        app = build_app(load_dict(doc, env or {}))
        return ProxyHandle(self, self.loop.run(_serve(make_runner(app))), app)

    def start_demo(self) -> ProxyHandle:
        app = build_app(None)
        return ProxyHandle(self, self.loop.run(_serve(make_runner(app))), app)

    def stop(self) -> None:
        self.loop.run(self._mock_served.runner.cleanup())
        self.loop.stop()


def default_config(mock_url: str) -> dict[str, Any]:
    return {
        "providers": {
            "chat": {
                "protocol": "openai_chat_completions",
                "base_url": mock_url + "/v1",
                "api_key": PROVIDER_KEYS["chat"],
                "read_idle_timeout_secs": 10,
            },
            "responses": {
                "protocol": "openai_responses",
                "base_url": mock_url + "/v1",
                "api_key": PROVIDER_KEYS["responses"],
                "read_idle_timeout_secs": 10,
            },
            "anthropic": {
                "protocol": "anthropic_messages",
                "base_url": mock_url,
                "api_key": PROVIDER_KEYS["anthropic"],
                "read_idle_timeout_secs": 10,
            },
        },
        "routing": {
            "default_providers": {
                "openai_chat_completions": "chat",
                "openai_responses": "responses",
                "anthropic_messages": "anthropic",
            },
            "routes": [
                {"name": name, "model_pattern": f"^{name}/(.+)$", "provider": name, "upstream_model": "$1"}
                for name in ("chat", "responses", "anthropic")
            ],
        },
    }


def traced(caplog, note: str, wait: float = 5.0) -> bool:
    """Whether a log record mentions `note`; a request's translation notes are logged
    (DEBUG) once its response is done, so they are waited for."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if any(note in r.getMessage() for r in caplog.records):
            return True
        time.sleep(0.02)
    return False


def slow_turn(words: int, delay: float) -> Turn:
    """An answer of `words` words (`w0 w1 ...`), one chunk each, `delay` seconds apart: a
    background run to poll, or to cancel before it ends."""
    text = " ".join(f"w{i}" for i in range(words))
    return Turn(blocks=[Text(text, chunks=[f"w{i}" + ("" if i == words - 1 else " ") for i in range(words)])],
                delay_secs=delay)


def wait_final(fetch, resource_id: str, final: tuple[str, ...], timeout: float = 15):
    """`fetch(resource_id)` polled until its status is one of `final` (a background run ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resource = fetch(resource_id)
        if resource.status in final:
            return resource
        time.sleep(0.05)
    raise AssertionError(f"{resource_id} still {resource.status} after {timeout}s")
