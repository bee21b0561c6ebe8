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
if sys.dont_write_bytecode and sys.pycache_prefix is None:
    # PYTHONDONTWRITEBYTECODE (set on some CI images) makes every run compile the project and
    # assertion-rewrite the test modules again, about ten seconds of the quick tier: keep the
    # compiled files in pytest's ignored cache directory instead of beside the sources.
    sys.pycache_prefix = str(ROOT / ".pytest_cache" / "pycache")
    sys.dont_write_bytecode = False
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from harness import Harness, ProxyHandle  # noqa: E402


import os  # noqa: E402
import tempfile as _tempfile  # noqa: E402

# Proxies started by session- or module-scoped fixtures (before any test's own home) use this one.
_HOMES: list[str] = [_tempfile.mkdtemp(prefix="proxai-test-home-")]
os.environ["PROXAI_HOME"] = _HOMES[0]
# The compiled-rules cache of the run (every server process it starts), not the user's.
os.environ["PROXAI_RULES_CACHE"] = os.path.join(_HOMES[0], "rules-cache")


@pytest.fixture(autouse=True)
def _proxai_home(monkeypatch):
    """Each test's proxies keep their files (the default sqlite state database) in a home of
    their own, so no test sees another's database. Not under pytest's numbered base temp,
    which another pytest run on the machine may prune; all are removed at the end."""
    import tempfile

    home = tempfile.mkdtemp(prefix="proxai-test-home-")
    _HOMES.append(home)
    monkeypatch.setenv("PROXAI_HOME", home)


def pytest_sessionfinish(session, exitstatus):
    import shutil

    for home in _HOMES:
        shutil.rmtree(home, ignore_errors=True)


def _share_the_sdk_trust_store() -> None:
    """Every official SDK client builds an SSL context and loads the whole CA bundle into it
    (a third of a second on a busy machine), though these tests speak plain HTTP to 127.0.0.1.
    Build it once per process; TLS behaviour is unchanged, only the loading is shared."""
    import functools
    import importlib

    for name in ("httpcore2", "httpcore"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        original = getattr(module, "default_ssl_context", None)
        if original is not None and not hasattr(original, "cache_info"):
            module.default_ssl_context = functools.lru_cache(maxsize=None)(original)


_share_the_sdk_trust_store()


@pytest.fixture(scope="session")
def harness():
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
def start_server(tmp_path):
    """`start(config_dict)`: the real server in a process of its own (server.py), stopped after the test."""
    from server_process import ServerProcess

    started: list = []

    def start(config: dict):
        started.append(ServerProcess(tmp_path, config))
        return started[-1]

    yield start
    for s in started:
        s.stop()


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


# --- the quick tier: `pytest -m "not slow"` -------------------------------------------------------
# Slow: load, fuzz and property-based modules, --workers, benchmarks and the tests that start
# `proxai` or `server.py` as a subprocess. A test can also carry @pytest.mark.slow itself.
SLOW_MARKERS = ("load", "fuzz")
SLOW_MODULES = frozenset({
    "test_load.py", "test_fuzz.py", "test_workers.py", "test_metrics_workers.py", "test_bench_smoke.py",
    "test_expr_closures.py", "test_sse_properties.py",  # property-based: hundreds of examples each
    "test_stream_integrity.py", "test_upstream_faults.py",  # long streams, stalls and timeouts
    # real processes, signals, fd limits, bombs and soaks; stalled uploads wait out their deadline
    "test_hardening_process.py", "test_hardening_bombs.py", "test_hardening_ingress.py", "test_hardening_upstream.py",
    "test_hardening_round3.py", "test_client_keys.py",
    "test_compressed_requests.py", "test_background.py",  # decompression bombs; runs waited on in the store
    "test_toy_protocol_e2e.py", "test_usage_override_e2e.py",  # a server process per rules folder
    "test_state_processes.py", "test_readiness_degraded.py", "test_resilience_processes.py", "test_bench_faults.py", "test_bench_cache_smoke.py",
    "test_inspector_browser.py",  # headless Chromium
    "test_real_clients.py", "test_real_codex_websocket.py", "test_real_claude_code_mcp.py",  # the real coding-agent CLIs
    "test_snippets.py",  # every code block of the README and docs/, each in a process of its own
    "test_corpus_fidelity.py", "test_corpus_replay_e2e.py",  # every recorded item toward every protocol
})
SLOW_TESTS = frozenset({  # module::function (every parametrization)
    "test_cli.py::test_server_py_demo_mode_serves_everything_out_of_the_box",
    "test_cli.py::test_server_py_with_config_file",
    "test_cli.py::test_server_py_refuses_a_bad_config",
    "test_cli.py::test_proxai_serve_json_logs",
    "test_cli.py::test_server_py_rejects_bad_arguments",
    "test_cli.py::test_non_loopback_bind_without_api_keys_warns",
    "test_cli.py::test_loopback_bind_does_not_warn",
    "test_log_format.py::test_human_lines_carry_milliseconds_the_utc_offset_and_the_pid",
    "test_log_format.py::test_json_lines_add_the_pid_and_keep_their_keys",
    "test_capture.py::test_capture_show_and_list",
    "test_capture.py::test_serve_capture_flag",
    "test_translate_cli.py::test_console_entry_point",
    "test_inspector.py::test_server_py_inspector_flag",
    # every broken and valid override through both the linter and the loader (a second each)
    "test_registry.py::test_lint_and_server_give_the_same_verdict_and_message",
    "test_lint.py::test_each_broken_file_is_caught_on_its_line",
    "test_registry.py::test_migrated_rules_load_as_v2_and_translate_byte_for_byte",
    "test_reload.py::test_check_config_loads_the_rules",
    "test_hardening_yaml.py::test_a_second_server_block_is_refused_not_silently_merged",
    "test_hardening_yaml.py::test_an_alias_bomb_in_the_config_fails_at_once",
    "test_hardening_yaml.py::test_an_alias_bomb_in_a_rule_file_fails_at_once",
    "test_ingress_fast_path.py::test_fast_path_agrees_with_jsonschema",
    "test_sse.py::test_roundtrip_any_split",
    # they wait out timeouts, stalls or slow streams
    "test_passthrough_e2e.py::test_idle_timeout_is_not_a_total_cap",
    "test_passthrough_e2e.py::test_idle_timeout_mid_stream_is_an_in_stream_error",
    "test_passthrough_e2e.py::test_tool_call_argument_stall_ends_the_stream",
    "test_passthrough_e2e.py::test_client_disconnect_cancels_the_upstream_request",
    "test_errors_e2e.py::test_upstream_silent_before_first_byte_is_504",
    "test_metrics.py::test_in_flight_gauge_counts_open_streams",
    "test_demo_models.py::test_demo_slow_streams_word_by_word",
    "test_reload.py::test_file_watch_reloads_on_change",
    "test_no_secrets_in_logs.py::test_full_run_leaks_nothing",  # every pair and error path at debug level
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        backend = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        if (item.path.name in SLOW_MODULES or f"{item.path.name}::{name}" in SLOW_TESTS
                or backend in ("sqlite", "redis")  # the memory backend stays in the quick tier
                or any(item.get_closest_marker(m) for m in SLOW_MARKERS)):
            item.add_marker(pytest.mark.slow)


def shared_state(backend: str, request, tmp_path) -> dict:
    """The `state:` config of a store several instances share: one real redis-server
    (flushed), or one SQLite file."""
    if backend == "redis":
        redis_server = request.getfixturevalue("redis_server")
        redis_server.flush()
        return {"backend": "redis", "url": redis_server.url}
    return {"backend": "sqlite", "url": str(tmp_path / "state.db")}
