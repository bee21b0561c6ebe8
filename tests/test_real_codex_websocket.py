"""The pinned Codex CLI over the proxy's Responses WebSocket, with request compression on,
toward Anthropic, Chat and Gemini providers.

The provider entry declares `supports_websockets = true`, so Codex opens `GET /v1/responses`
as a WebSocket and sends each turn as a `response.create` message (after a turn, only the
new items with `previous_response_id` naming the socket's last response); request
compression (`features.enable_request_compression`) covers its HTTP requests. Each run must exit 0 and finish its tool loop, the command's output
reaching the provider as the tool result; every turn must have gone over the socket.
"""

from __future__ import annotations

import logging

import pytest

from test_real_clients import FINAL, PROMPT, agent_script, base_env, check_upstream, cli, proxy_to, run
from harness import CLIENT_KEY

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROVIDERS = ["anthropic_messages", "openai_chat_completions", "gemini_generate_content"]


def codex_ws_config(proxy_url: str, compact_limit: int | None = None) -> str:
    return "\n".join([
        'model_provider = "proxai"',
        "check_for_update_on_startup = false",
        *([f"model_auto_compact_token_limit = {compact_limit}"] if compact_limit else []),
        "",
        "[features]",
        "enable_request_compression = true",
        "",
        "[model_providers.proxai]",
        'name = "ProxAI"',
        f'base_url = "{proxy_url}/v1"',
        'env_key = "PROXAI_API_KEY"',
        'wire_api = "responses"',
        "supports_websockets = true",
        "",
        "[analytics]",
        "enabled = false",
        "",
    ])


def codex_ws_env(home, proxy_url: str, compact_limit: int | None = None) -> dict:
    env = base_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_ws_config(proxy_url, compact_limit))
    env.update({"CODEX_HOME": str(codex_home), "PROXAI_API_KEY": CLIENT_KEY})
    return env


@pytest.fixture
def turns_log(caplog):
    caplog.set_level(logging.INFO, logger="proxai.request")
    return caplog


def socket_turns(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if getattr(r, "fields", {}).get("method") == "WEBSOCKET"]


@pytest.mark.parametrize("provider_protocol", PROVIDERS)
def test_codex_over_the_websocket(start_proxy, harness, mock, tmp_path, provider_protocol, turns_log):
    codex = cli("codex")
    mock.responder = agent_script
    proxy = proxy_to(start_proxy, harness, provider_protocol, "*")
    work = tmp_path / "work"
    work.mkdir()
    result = run([codex, "exec", "--skip-git-repo-check", PROMPT], codex_ws_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    check_upstream(mock, provider_protocol, replays_reasoning=True)
    turns = socket_turns(turns_log)
    assert len([t for t in turns if t.get("provider")]) >= 2, turns  # the tool call's turn and its result's
    assert all(t["status"] == 200 for t in turns), turns

