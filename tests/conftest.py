"""Shared fixtures: one event loop thread and one mock upstream per session.

- `harness`: the Harness (loop thread, mock upstream, proxy factory).
- `mock`: the MockUpstream, reset before each test.
- `proxy`: a running proxy with the default config (providers chat / responses
  / anthropic on the mock; model `<provider>/<name>` routes to a provider and
  is rewritten to `<name>`; otherwise each protocol's same-protocol default).
- `start_proxy(config_dict, env=None)`: another proxy, stopped after the test.
- `openai_client`, `anthropic_client`: official SDK clients on `proxy`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from harness import Harness, ProxyHandle  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _proxai_home(tmp_path_factory):
    """Proxies started by tests keep their files (the state database) in a temporary home."""
    import os

    previous = os.environ.get("PROXAI_HOME")
    os.environ["PROXAI_HOME"] = str(tmp_path_factory.mktemp("proxai-home"))
    yield
    if previous is None:
        os.environ.pop("PROXAI_HOME", None)
    else:
        os.environ["PROXAI_HOME"] = previous


@pytest.fixture(scope="session")
def harness(_proxai_home):
    h = Harness.start()
    yield h
    h.stop()


@pytest.fixture(scope="session")
def _default_proxy(harness: Harness):
    p = harness.start_proxy()
    yield p
    p.stop()


@pytest.fixture
def mock(harness: Harness):
    harness.mock.reset()
    yield harness.mock
    harness.mock.reset()


@pytest.fixture
def proxy(_default_proxy: ProxyHandle, mock) -> ProxyHandle:
    return _default_proxy


@pytest.fixture
def start_proxy(harness: Harness, mock):
    started: list[ProxyHandle] = []

    def start(config: dict | None = None, env: dict | None = None) -> ProxyHandle:
        p = harness.start_proxy(config, env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def openai_client(proxy: ProxyHandle):
    client = proxy.openai()
    yield client
    client.close()


@pytest.fixture
def anthropic_client(proxy: ProxyHandle):
    client = proxy.anthropic()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server for the state tests; skipped (with the reason) when not installed."""
    from bench.redis_server import RedisServer

    if RedisServer.available() is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install -y redis-server; .ci/run installs it)")
    try:
        import redis  # noqa: F401
    except ImportError:
        pytest.skip("the redis Python package is not installed (pip install -e '.[test]')")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()
